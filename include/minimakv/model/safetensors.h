// Reading safetensors checkpoints: single files and sharded checkpoints (model.safetensors.index.json).
//
// Owns: validation of the header with the rules of the reference implementation and read-only memory
// maps of the tensor data. Invariants of an opened file: 8-byte little-endian header length N with
// N <= 100,000,000 and 8 + N <= file size; the header is a JSON object (UTF-8, space padding allowed);
// every tensor has a known dtype, a shape of non-negative integers and data_offsets [begin, end] with
// end - begin == numel * dtype size (no overflow); sorted by begin the tensors tile the data region
// exactly (first begins at 0, each begins where the previous ends, the last ends at the end of the
// file); names are unique; "__metadata__" is a string-to-string object. Any violation throws
// CheckpointError naming the file and the fault; nothing half-loaded is returned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace minimakv::model {

struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class DType : uint8_t {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
  kF8E4M3,
  kF8E5M2
};
size_t dtype_size(DType t);
const char* to_string(DType t);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  size_t begin = 0, end = 0;  // byte offsets inside the data region
  size_t numel() const;
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // in file order of offsets
  std::map<std::string, std::string> metadata;
  size_t data_offset = 0;  // 8 + N
};

// Validates a whole file image (header and sizes). `file` names the file in error messages.
SafetensorsHeader parse_safetensors(std::span<const uint8_t> bytes, const std::string& file);

// Validates model.safetensors.index.json text: a JSON object whose weight_map maps tensor names to shard
// file names inside the checkpoint directory. Returns tensor -> shard; throws CheckpointError naming
// `file` and the fault.
std::map<std::string, std::string> parse_checkpoint_index(std::string_view text, const std::string& file);

class MappedFile;

class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const TensorInfo* find(std::string_view name) const;
  std::span<const uint8_t> data(const TensorInfo& t) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::unique_ptr<MappedFile> map_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> index_;
};

// A checkpoint directory: model.safetensors, or the shards listed by model.safetensors.index.json.
class Checkpoint {
 public:
  static Checkpoint open(const std::string& dir);
  const TensorInfo& tensor(std::string_view name) const;  // throws CheckpointError when missing
  bool has(std::string_view name) const;
  std::span<const uint8_t> data(std::string_view name) const;
  std::vector<std::string> names() const;
  // Copies a tensor to fp32 (BF16, F16 and F32 are supported), checking its shape first.
  std::vector<float> load_f32(std::string_view name, std::span<const int64_t> expected_shape) const;
  // Copies a tensor to BF16 bit patterns: BF16 as stored, F16 and F32 rounded to nearest even.
  std::vector<uint16_t> load_bf16(std::string_view name, std::span<const int64_t> expected_shape) const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<size_t, size_t>, std::less<>> where_;  // name -> (file, tensor)
  const TensorInfo& checked(std::string_view name, std::span<const int64_t> expected_shape) const;
  std::string dir_;
};

}  // namespace minimakv::model
