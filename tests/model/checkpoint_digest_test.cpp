// checkpoint_digest: the same files give the same digest under any path; any byte of a weight file,
// the config, the KV profile or the tokenizer changes it; a directory without config.json is refused.
#include "minimakv/model/checkpoint_digest.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "minimakv/model/config.h"
#include "test_util.h"

namespace minimakv::model {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

std::string random_bytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

class CheckpointDigest : public ::testing::Test {
 protected:
  void SetUp() override {
    rng_ = testing::rng_for_test();
    root_ = fs::temp_directory_path() / ("minimakv-digest-" + std::to_string(rng_()));
    a_ = root_ / "a";
    fs::create_directories(a_);
    write(a_ / "config.json", R"({"model_type": "qwen3", "seed": )" + std::to_string(rng_() % 1000) + "}");
    write(a_ / "tokenizer.json", random_bytes(rng_, 300));
    // Two shards, one larger than the reader's 1 MiB buffer.
    write(a_ / "model-00001-of-00002.safetensors", random_bytes(rng_, (size_t{1} << 20) + 4321));
    write(a_ / "model-00002-of-00002.safetensors", random_bytes(rng_, 777));
  }
  void TearDown() override { fs::remove_all(root_); }
  // A copy of a_ under another path.
  fs::path copy(const std::string& name) {
    const fs::path b = root_ / name;
    fs::copy(a_, b, fs::copy_options::recursive);
    return b;
  }
  std::mt19937_64 rng_;
  fs::path root_, a_;
};

TEST_F(CheckpointDigest, SameFilesUnderAnotherPathGiveTheSameDigest) {
  const std::string d = checkpoint_digest(a_.string());
  EXPECT_EQ(d.size(), 16u);
  EXPECT_EQ(d.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(checkpoint_digest(copy("elsewhere").string()), d);
  EXPECT_EQ(checkpoint_digest(a_.string() + "/"), d);
}

TEST_F(CheckpointDigest, AnyIdentityByteChangesIt) {
  const std::string d = checkpoint_digest(a_.string());
  for (const char* name : {"config.json", "tokenizer.json", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors"}) {
    const fs::path b = copy(std::string("flip-") + name);
    std::fstream f(b / name, std::ios::in | std::ios::out | std::ios::binary);
    const auto size = static_cast<std::streamoff>(fs::file_size(b / name));
    const std::streamoff at = static_cast<std::streamoff>(rng_() % static_cast<uint64_t>(size));
    f.seekg(at);
    char c = 0;
    f.get(c);
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x01));
    f.close();
    EXPECT_NE(checkpoint_digest(b.string()), d) << name << " byte " << at;
  }
  {  // a KV profile decides the default minima arm: adding one is a different model to an evaluation
    const fs::path b = copy("profiled");
    write(b / "kv_profile.json", R"({"version": 1, "tq4_layers": [0]})");
    EXPECT_NE(checkpoint_digest(b.string()), d);
  }
  {  // a shard renamed or removed
    const fs::path b = copy("renamed");
    fs::rename(b / "model-00002-of-00002.safetensors", b / "model-00003-of-00003.safetensors");
    EXPECT_NE(checkpoint_digest(b.string()), d);
    fs::remove(b / "model-00003-of-00003.safetensors");
    EXPECT_NE(checkpoint_digest(b.string()), d);
  }
  {  // files outside the identity (logs, model cards) do not count
    const fs::path b = copy("with-log");
    write(b / "train_log.jsonl", "{}\n");
    EXPECT_EQ(checkpoint_digest(b.string()), d);
  }
}

TEST_F(CheckpointDigest, ADirectoryWithoutConfigIsRefused) {
  const fs::path b = copy("no-config");
  fs::remove(b / "config.json");
  EXPECT_THROW(checkpoint_digest(b.string()), ConfigError);
  EXPECT_THROW(checkpoint_digest((root_ / "missing").string()), ConfigError);
}

}  // namespace
}  // namespace minimakv::model
