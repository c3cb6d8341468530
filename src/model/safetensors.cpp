#include "minimakv/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "minimakv/codec/half.h"

namespace minimakv::model {

namespace {
constexpr uint64_t kMaxHeader = 100'000'000;  // as the reference implementation

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw CheckpointError(file + ": " + what);
}

DType parse_dtype(const std::string& s, const std::string& file, const std::string& tensor) {
  static const std::map<std::string, DType> k = {
      {"BOOL", DType::kBool}, {"U8", DType::kU8},          {"I8", DType::kI8},         {"I16", DType::kI16},
      {"U16", DType::kU16},   {"F16", DType::kF16},        {"BF16", DType::kBF16},     {"I32", DType::kI32},
      {"U32", DType::kU32},   {"F32", DType::kF32},        {"F64", DType::kF64},       {"I64", DType::kI64},
      {"U64", DType::kU64},   {"F8_E4M3", DType::kF8E4M3}, {"F8_E5M2", DType::kF8E5M2}};
  auto it = k.find(s);
  if (it == k.end()) fail(file, "tensor '" + tensor + "' has unknown dtype '" + s + "'");
  return it->second;
}
// JSON allows an object to name a key twice and nlohmann keeps the last; in a checkpoint that hides a
// tensor, so the parse records the first repeated key of any object in `duplicate`.
nlohmann::json parse_json_unique(std::string_view text, std::string& duplicate) {
  std::vector<std::set<std::string>> open;  // the keys seen so far in each enclosing object
  auto on_event = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) open.emplace_back();
    else if (event == E::object_end) open.pop_back();
    else if (event == E::key && !open.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  return nlohmann::json::parse(text, on_event);
}

}  // namespace

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kBool:
    case DType::kU8:
    case DType::kI8:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return 1;
    case DType::kI16:
    case DType::kU16:
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI32:
    case DType::kU32:
    case DType::kF32:
      return 4;
    case DType::kF64:
    case DType::kI64:
    case DType::kU64:
      return 8;
  }
  return 0;
}

const char* to_string(DType t) {
  switch (t) {
    case DType::kBool:
      return "BOOL";
    case DType::kU8:
      return "U8";
    case DType::kI8:
      return "I8";
    case DType::kI16:
      return "I16";
    case DType::kU16:
      return "U16";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kI32:
      return "I32";
    case DType::kU32:
      return "U32";
    case DType::kF32:
      return "F32";
    case DType::kF64:
      return "F64";
    case DType::kI64:
      return "I64";
    case DType::kU64:
      return "U64";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kF8E5M2:
      return "F8_E5M2";
  }
  return "?";
}

size_t TensorInfo::numel() const {
  size_t n = 1;
  for (int64_t s : shape) n *= static_cast<size_t>(s);
  return n;
}

SafetensorsHeader parse_safetensors(std::span<const uint8_t> bytes, const std::string& file) {
  if (bytes.size() < 8)
    fail(file, "file is " + std::to_string(bytes.size()) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];
  if (n > kMaxHeader) fail(file, "header length " + std::to_string(n) + " exceeds the limit of 100000000 bytes");
  if (n > bytes.size() - 8) fail(file, "header length " + std::to_string(n) + " runs past the end of the file");
  if (n == 0) fail(file, "header length is 0: the file has no header");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), n);
  if (text.front() != '{') fail(file, "header is not a JSON object");
  nlohmann::json j;
  std::string duplicate;
  try {
    j = parse_json_unique(text, duplicate);
  } catch (const nlohmann::json::exception& e) {
    fail(file, std::string("header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) fail(file, "header names '" + duplicate + "' twice");
  if (!j.is_object()) fail(file, "header is not a JSON object");
  SafetensorsHeader h;
  h.data_offset = 8 + n;
  const size_t data_size = bytes.size() - h.data_offset;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(file, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail(file, "__metadata__ value for '" + m.key() + "' is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail(file, "tensor '" + name + "' needs dtype, shape and data_offsets");
    if (!v["dtype"].is_string()) fail(file, "tensor '" + name + "' dtype is not a string");
    TensorInfo t;
    t.name = name;
    t.dtype = parse_dtype(v["dtype"].get<std::string>(), file, name);
    if (!v["shape"].is_array()) fail(file, "tensor '" + name + "' shape is not an array");
    size_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        fail(file, "tensor '" + name + "' has a negative or non-integer dimension");
      const auto dim = static_cast<size_t>(d.get<int64_t>());
      if (dim != 0 && numel > std::numeric_limits<size_t>::max() / dim)
        fail(file, "tensor '" + name + "' element count overflows");
      numel *= dim;
      t.shape.push_back(d.get<int64_t>());
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(file, "tensor '" + name + "' data_offsets must be two non-negative integers");
    t.begin = off[0].get<size_t>();
    t.end = off[1].get<size_t>();
    if (t.end < t.begin) fail(file, "tensor '" + name + "' data_offsets end before they begin");
    if (t.end > data_size)
      fail(file, "tensor '" + name + "' data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                     ") run past the end of the data region (" + std::to_string(data_size) + " bytes)");
    if (numel > std::numeric_limits<size_t>::max() / dtype_size(t.dtype))
      fail(file, "tensor '" + name + "' byte size overflows");
    if (t.end - t.begin != numel * dtype_size(t.dtype))
      fail(file, "tensor '" + name + "' holds " + std::to_string(t.end - t.begin) +
                     " bytes, its shape and dtype need " + std::to_string(numel * dtype_size(t.dtype)));
    h.tensors.push_back(std::move(t));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  size_t expect = 0;
  for (const TensorInfo& t : h.tensors) {
    if (t.begin != expect)
      fail(file, "tensor '" + t.name + "' starts at byte " + std::to_string(t.begin) + ", expected " +
                     std::to_string(expect) + " (offsets must be contiguous)");
    expect = t.end;
  }
  if (expect != data_size)
    fail(file,
         "tensors cover " + std::to_string(expect) + " bytes but the data region holds " + std::to_string(data_size));
  return h;
}

// ------------------------------------------------------------------ memory map

class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail(path, std::string("cannot stat: ") + std::strerror(errno));
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
      if (p == MAP_FAILED) fail(path, std::string("cannot map: ") + std::strerror(errno));
      data_ = static_cast<const uint8_t*>(p);
    }
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    if (fd_ >= 0) ::close(fd_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::span<const uint8_t> bytes() const { return {data_, size_}; }

 private:
  int fd_ = -1;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

SafetensorsFile::~SafetensorsFile() = default;

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_ = std::make_unique<MappedFile>(path);
  f->header_ = parse_safetensors(f->map_->bytes(), path);
  for (size_t i = 0; i < f->header_.tensors.size(); ++i) f->index_[f->header_.tensors[i].name] = i;
  return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

std::span<const uint8_t> SafetensorsFile::data(const TensorInfo& t) const {
  return map_->bytes().subspan(header_.data_offset + t.begin, t.end - t.begin);
}

// ------------------------------------------------------------------ checkpoint directory

std::map<std::string, std::string> parse_checkpoint_index(std::string_view text, const std::string& file) {
  nlohmann::json j;
  std::string duplicate;
  try {
    j = parse_json_unique(text, duplicate);
  } catch (const nlohmann::json::exception& e) {
    fail(file, std::string("not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) fail(file, "names '" + duplicate + "' twice");
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) fail(file, "no weight_map object");
  std::map<std::string, std::string> out;
  const auto& wm = j["weight_map"];
  for (auto it = wm.begin(); it != wm.end(); ++it) {
    if (!it.value().is_string()) fail(file, "weight_map entry '" + it.key() + "' is not a file name");
    std::string s = it.value().get<std::string>();
    if (s.empty() || s.find('/') != std::string::npos || s.find('\\') != std::string::npos ||
        s.find("..") != std::string::npos)
      fail(file, "shard name '" + s + "' leaves the checkpoint directory");
    out.emplace(it.key(), std::move(s));
  }
  return out;
}

Checkpoint Checkpoint::open(const std::string& dir) {
  namespace fs = std::filesystem;
  Checkpoint c;
  c.dir_ = dir;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> shard_names;
  std::map<std::string, std::string> weight_map;
  if (fs::exists(index)) {
    std::ifstream in(index);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    weight_map = parse_checkpoint_index(text, index.string());
    std::set<std::string> shards;
    for (const auto& [tensor, shard] : weight_map) shards.insert(shard);
    shard_names.assign(shards.begin(), shards.end());
  } else if (fs::exists(single)) {
    shard_names.push_back("model.safetensors");
  } else {
    fail(dir, "no model.safetensors or model.safetensors.index.json");
  }
  for (const std::string& s : shard_names) {
    c.files_.push_back(SafetensorsFile::open((fs::path(dir) / s).string()));
    const auto& h = c.files_.back()->header();
    for (size_t t = 0; t < h.tensors.size(); ++t) {
      if (!c.where_.emplace(h.tensors[t].name, std::make_pair(c.files_.size() - 1, t)).second)
        fail(dir, "tensor '" + h.tensors[t].name + "' appears in two shards");
    }
  }
  for (const auto& [tensor, shard] : weight_map) {
    auto w = c.where_.find(tensor);
    if (w == c.where_.end()) fail(index.string(), "tensor '" + tensor + "' is listed but missing from its shard");
    if (c.files_[w->second.first]->path() != (fs::path(dir) / shard).string())
      fail(index.string(), "tensor '" + tensor + "' is not in the shard the index names");
  }
  return c;
}

bool Checkpoint::has(std::string_view name) const {
  return where_.find(name) != where_.end();
}

const TensorInfo& Checkpoint::tensor(std::string_view name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail(dir_, "missing tensor '" + std::string(name) + "'");
  return files_[it->second.first]->header().tensors[it->second.second];
}

std::span<const uint8_t> Checkpoint::data(std::string_view name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail(dir_, "missing tensor '" + std::string(name) + "'");
  const auto& f = *files_[it->second.first];
  return f.data(f.header().tensors[it->second.second]);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [n, w] : where_) out.push_back(n);
  return out;
}

const TensorInfo& Checkpoint::checked(std::string_view name, std::span<const int64_t> expected_shape) const {
  const TensorInfo& t = tensor(name);
  if (!std::equal(t.shape.begin(), t.shape.end(), expected_shape.begin(), expected_shape.end())) {
    std::string got, want;
    for (auto s : t.shape) got += std::to_string(s) + " ";
    for (auto s : expected_shape) want += std::to_string(s) + " ";
    fail(dir_, "tensor '" + t.name + "' has shape [ " + got + "], config.json implies [ " + want + "]");
  }
  if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16)
    fail(dir_, "tensor '" + t.name + "' has dtype " + to_string(t.dtype) + " (supported: BF16, F16, F32)");
  return t;
}

std::vector<float> Checkpoint::load_f32(std::string_view name, std::span<const int64_t> expected_shape) const {
  const TensorInfo& t = checked(name, expected_shape);
  const auto bytes = data(name);
  std::vector<float> out(t.numel());
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == DType::kF32) {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
    } else {
      uint16_t b;
      std::memcpy(&b, bytes.data() + 2 * i, 2);
      out[i] = t.dtype == DType::kBF16 ? codec::bf16_to_float(b) : codec::half_to_float(b);
    }
  }
  return out;
}

std::vector<uint16_t> Checkpoint::load_bf16(std::string_view name, std::span<const int64_t> expected_shape) const {
  const TensorInfo& t = checked(name, expected_shape);
  const auto bytes = data(name);
  std::vector<uint16_t> out(t.numel());
  if (t.dtype == DType::kBF16) {
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    float f;
    if (t.dtype == DType::kF32) {
      std::memcpy(&f, bytes.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      f = codec::half_to_float(h);
    }
    out[i] = codec::float_to_bf16(f);
  }
  return out;
}

}  // namespace minimakv::model
