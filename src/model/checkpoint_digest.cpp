#include "minimakv/model/checkpoint_digest.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "minimakv/model/config.h"

namespace minimakv::model {

namespace fs = std::filesystem;

namespace {

struct StateDeleter {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};

void add_name(XXH3_state_t* st, const std::string& name) {
  const uint64_t n = name.size();
  XXH3_64bits_update(st, &n, sizeof n);
  XXH3_64bits_update(st, name.data(), name.size());
}

// Adds name, size and bytes of dir/name; an absent optional file adds its name and a marker instead.
void add_file(XXH3_state_t* st, const fs::path& dir, const std::string& name, bool required) {
  add_name(st, name);
  std::ifstream in(dir / name, std::ios::binary);
  if (!in) {
    if (required) throw ConfigError((dir / name).string() + ": cannot read");
    const uint64_t absent = ~uint64_t{0};
    XXH3_64bits_update(st, &absent, sizeof absent);
    return;
  }
  const uint64_t size = fs::file_size(dir / name);
  XXH3_64bits_update(st, &size, sizeof size);
  std::vector<char> buf(size_t{1} << 20);
  uint64_t read = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = static_cast<size_t>(in.gcount());
    XXH3_64bits_update(st, buf.data(), got);
    read += got;
  }
  if (read != size) throw ConfigError((dir / name).string() + ": read fewer bytes than its size");
}

}  // namespace

std::string checkpoint_digest(const std::string& dir_path) {
  const fs::path dir(dir_path);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw ConfigError(dir_path + ": not a model directory");
  std::unique_ptr<XXH3_state_t, StateDeleter> st(XXH3_createState());
  if (!st || XXH3_64bits_reset(st.get()) != XXH_OK) throw std::bad_alloc();
  add_file(st.get(), dir, "config.json", true);
  for (const char* optional : {"kv_profile.json", "tokenizer.json", "tokenizer_config.json"})
    add_file(st.get(), dir, optional, false);
  std::vector<std::string> shards;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") shards.push_back(e.path().filename().string());
  std::sort(shards.begin(), shards.end());
  const uint64_t count = shards.size();
  XXH3_64bits_update(st.get(), &count, sizeof count);
  for (const auto& s : shards) add_file(st.get(), dir, s, true);
  return fmt::format("{:016x}", XXH3_64bits_digest(st.get()));
}

}  // namespace minimakv::model
