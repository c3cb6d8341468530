#include "minimakv/cache/forward_step.h"

#include <exception>
#include <string>

#include "minimakv/cache/kv_store.h"

namespace minimakv::cache {

// ------------------------------------------------------------------ PagedView

PagedView::PagedView(PagedView&& o) noexcept
    : store_(o.store_),
      pin_id_(o.pin_id_),
      layer_(o.layer_),
      length_(o.length_),
      last_fill_(o.last_fill_),
      tokens_per_page_(o.tokens_per_page_),
      entries_(std::move(o.entries_)) {  // the buffer the store's pin table names moves with it
  o.pin_id_ = 0;
}

PagedView::~PagedView() {
  if (pin_id_ != 0) store_->unpin(pin_id_);
}

PageEntry PagedView::page(size_t logical) const {
  if (logical >= entries_.size())
    throw InvalidArgument("PagedView: page " + std::to_string(logical) + " of " + std::to_string(entries_.size()));
  return entries_[logical];
}

uint32_t PagedView::fill(size_t logical) const {
  (void)page(logical);
  return logical + 1 == entries_.size() ? last_fill_ : tokens_per_page_;
}

CompactLayerView PagedView::by_format() const {
  CompactLayerView v;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const int f = codec::format_index(entries_[i].format);
    v.ids[f].push_back(entries_[i].id);
    v.logical[f].push_back(static_cast<uint32_t>(i));
  }
  return v;
}

// ------------------------------------------------------------------ ForwardStep

ForwardStep::ForwardStep(KvStore* store, std::vector<SeqId> seqs, int layers)
    : store_(store),
      seqs_(std::move(seqs)),
      written_(seqs_.size() * static_cast<size_t>(layers), 0),
      layers_(layers),
      uncaught_(std::uncaught_exceptions()) {}

ForwardStep::ForwardStep(ForwardStep&& o) noexcept
    : store_(o.store_),
      seqs_(std::move(o.seqs_)),
      written_(std::move(o.written_)),
      layers_(o.layers_),
      open_(o.open_),
      uncaught_(o.uncaught_) {
  o.open_ = false;
}

ForwardStep::~ForwardStep() {
  if (!open_) return;
  bool complete = std::uncaught_exceptions() <= uncaught_;
  for (uint8_t w : written_) complete &= w != 0;
  if (complete) {
    try {
      commit();
      return;
    } catch (...) {  // out of memory while sealing: roll back what was not committed
    }
  }
  store_->step_abandon(seqs_);
}

const StoreConfig& ForwardStep::config() const {
  return store_->config();
}

const codec::PageGeometry& ForwardStep::geometry() const {
  return store_->geometry();
}

PageFormat ForwardStep::append_format() const {
  return store_->append_format();
}

PageStorage& ForwardStep::storage() const {
  return store_->storage();
}

std::vector<WriteSlot> ForwardStep::write_slots(size_t i, int layer) {
  if (!open_) throw InvalidArgument("write_slots: the step has ended");
  if (i >= seqs_.size())
    throw InvalidArgument("write_slots: sequence " + std::to_string(i) + " of " + std::to_string(seqs_.size()));
  if (layer < 0 || layer >= layers_)
    throw InvalidArgument("write_slots: layer " + std::to_string(layer) + " out of range");
  uint8_t& w = written_[i * static_cast<size_t>(layers_) + static_cast<size_t>(layer)];
  if (w) throw InvalidArgument("write_slots: layer " + std::to_string(layer) + " already handed out");
  auto slots = store_->step_slots(seqs_[i], layer);
  w = 1;
  return slots;
}

PagedView ForwardStep::view(size_t i, int layer) const {
  if (i >= seqs_.size())
    throw InvalidArgument("view: sequence " + std::to_string(i) + " of " + std::to_string(seqs_.size()));
  return store_->view(seqs_[i], layer);
}

void ForwardStep::commit() {
  if (!open_) throw InvalidArgument("commit: the step has ended");
  for (size_t i = 0; i < written_.size(); ++i)
    if (!written_[i])
      throw InvalidArgument("commit: layer " + std::to_string(i % static_cast<size_t>(layers_)) + " of sequence " +
                            std::to_string(seqs_[i / static_cast<size_t>(layers_)]) + " was not written");
  store_->step_commit(seqs_);
  open_ = false;
}

}  // namespace minimakv::cache
