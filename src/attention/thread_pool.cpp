#include "minimakv/attention/thread_pool.h"

namespace minimakv::attention {

ThreadPool::ThreadPool(unsigned threads) {
  const unsigned extra = threads > 1 ? threads - 1 : 0;
  for (unsigned i = 0; i < extra; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_items() {
  for (;;) {
    size_t i;
    const std::function<void(size_t)>* fn;
    {
      std::lock_guard lock(mu_);
      if (next_ >= n_) return;
      i = next_++;
      fn = fn_;
    }
    try {
      (*fn)(i);
    } catch (...) {
      std::lock_guard lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++active_;
    }
    run_items();
    {
      std::lock_guard lock(mu_);
      --active_;
    }
    done_cv_.notify_all();
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  std::lock_guard call(call_mu_);
  {
    std::lock_guard lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  cv_.notify_all();
  run_items();
  std::exception_ptr err;
  {
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return next_ >= n_ && active_ == 0; });
    err = error_;
    fn_ = nullptr;
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace minimakv::attention
