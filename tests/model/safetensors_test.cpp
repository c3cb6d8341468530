// safetensors reader: valid files round-trip; every validation rule rejects a malformed file with an
// error naming the file and the fault; sharded checkpoints; the shipped model's tensors match its
// config.json.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "minimakv/codec/half.h"
#include "minimakv/model/config.h"
#include "minimakv/model/safetensors.h"
#include "test_util.h"

namespace minimakv::model {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> image(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8 + header.size() + data.size());
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

// Two BF16 tensors a [2,3] and b [4] back to back, plus metadata.
std::pair<std::string, std::vector<uint8_t>> valid_parts() {
  nlohmann::json h;
  h["__metadata__"] = {{"format", "pt"}};
  h["a"] = {{"dtype", "BF16"}, {"shape", {2, 3}}, {"data_offsets", {0, 12}}};
  h["b"] = {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {12, 28}}};
  std::vector<uint8_t> data(28);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i);
  return {h.dump(), data};
}

void expect_fault(const std::vector<uint8_t>& bytes, const std::string& fragment) {
  try {
    parse_safetensors(bytes, "bad.safetensors");
    FAIL() << "accepted a file that should fail with: " << fragment;
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

TEST(Safetensors, ParsesValidHeader) {
  auto [h, d] = valid_parts();
  const auto hdr = parse_safetensors(image(h, d), "ok.safetensors");
  ASSERT_EQ(hdr.tensors.size(), 2u);
  EXPECT_EQ(hdr.tensors[0].name, "a");
  EXPECT_EQ(hdr.tensors[0].dtype, DType::kBF16);
  EXPECT_EQ(hdr.tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(hdr.metadata.at("format"), "pt");
  // trailing spaces in the header are allowed
  EXPECT_NO_THROW(parse_safetensors(image(h + "    ", d), "ok.safetensors"));
}

TEST(Safetensors, RejectsEveryMalformedVariant) {
  auto [h, d] = valid_parts();
  expect_fault({1, 2, 3}, "shorter than the 8-byte header length");
  auto big = image(h, d);
  big[4] = 0x10;  // header length ~ 2^36
  expect_fault(big, "exceeds the limit");
  auto past = image(h, d);
  past[0] = static_cast<uint8_t>(past[0] + 100);
  expect_fault(std::vector<uint8_t>(past.begin(), past.end() - 28 - 40), "runs past the end");
  expect_fault(image("[1,2]", {}), "not a JSON object");
  expect_fault(image("{\"a\": ", {}), "not valid JSON");
  auto j = nlohmann::json::parse(h);
  auto with = [&](auto edit) {
    auto k = j;
    edit(k);
    return image(k.dump(), d);
  };
  expect_fault(with([](auto& k) { k["a"]["dtype"] = "Q4"; }), "unknown dtype");
  expect_fault(with([](auto& k) { k["a"]["shape"] = {2, -3}; }), "negative or non-integer dimension");
  expect_fault(with([](auto& k) { k["a"]["data_offsets"] = {0, 10}; }), "shape and dtype need");
  expect_fault(with([](auto& k) { k["b"]["data_offsets"] = {10, 26}; }), "contiguous");
  expect_fault(with([](auto& k) { k["a"]["data_offsets"] = {12, 0}; }), "end before they begin");
  expect_fault(with([](auto& k) { k["__metadata__"]["x"] = 3; }), "is not a string");
  expect_fault(with([](auto& k) { k["b"].erase("shape"); }), "needs dtype, shape and data_offsets");
  auto extra = d;
  extra.push_back(0);
  expect_fault(image(h, extra), "data region holds");
  std::vector<uint8_t> bad_utf8 = image("{\"\xff\xfe\": 1}", {});
  expect_fault(bad_utf8, "not valid JSON");
  // Each of these is named as what it is, not through a later symptom.
  expect_fault(image("", d), "header length is 0");
  const std::string a = R"("a": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]})";
  expect_fault(image("{" + a + ", " + a + "}", std::vector<uint8_t>(12)), "names 'a' twice");
  expect_fault(image(R"({"__metadata__": {"k": "1", "k": "2"}})", {}), "names 'k' twice");
  expect_fault(with([](auto& k) { k["b"]["data_offsets"] = {12, 4000}; k["b"]["shape"] = {997}; }),
               "run past the end of the data region (28 bytes)");
}

TEST(Safetensors, FuzzedHeadersNeverCrash) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  auto [h, d] = valid_parts();
  const auto good = image(h, d);
  for (int i = 0; i < 20000; ++i) {
    auto b = good;
    for (int m = 0; m < 1 + static_cast<int>(rng() % 4); ++m) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    if (rng() % 8 == 0) b.resize(rng() % b.size());
    try {
      parse_safetensors(b, "fuzz");
    } catch (const CheckpointError&) {
    }
  }
}

using testing::TempDir;

TEST(Checkpoint, ShardedIndexAndValues) {
  TempDir dir;
  nlohmann::json h1, h2;
  std::vector<uint8_t> d1(8), d2(4);
  const float vals[2] = {1.5f, -2.25f};
  std::memcpy(d1.data(), vals, 8);
  const uint16_t bf[2] = {codec::float_to_bf16(3.0f), codec::float_to_bf16(-0.5f)};
  std::memcpy(d2.data(), bf, 4);
  h1["x"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
  h2["y"] = {{"dtype", "BF16"}, {"shape", {1, 2}}, {"data_offsets", {0, 4}}};
  dir.write("model-00001-of-00002.safetensors", image(h1.dump(), d1));
  dir.write("model-00002-of-00002.safetensors", image(h2.dump(), d2));
  nlohmann::json idx;
  idx["weight_map"] = {{"x", "model-00001-of-00002.safetensors"}, {"y", "model-00002-of-00002.safetensors"}};
  dir.write("model.safetensors.index.json", idx.dump());
  const Checkpoint c = Checkpoint::open(dir.str());
  const int64_t sx[] = {2}, sy[] = {1, 2}, wrong[] = {2, 1};
  EXPECT_EQ(c.load_f32("x", sx), (std::vector<float>{1.5f, -2.25f}));
  EXPECT_EQ(c.load_f32("y", sy), (std::vector<float>{3.0f, -0.5f}));
  EXPECT_THROW(c.load_f32("y", wrong), CheckpointError);
  EXPECT_THROW(c.tensor("z"), CheckpointError);
  idx["weight_map"]["z"] = "model-00001-of-00002.safetensors";
  dir.write("model.safetensors.index.json", idx.dump());
  EXPECT_THROW(Checkpoint::open(dir.str()), CheckpointError);  // listed but missing
  idx["weight_map"].erase("z");
  idx["weight_map"]["x"] = "../model-00001-of-00002.safetensors";
  dir.write("model.safetensors.index.json", idx.dump());
  EXPECT_THROW(Checkpoint::open(dir.str()), CheckpointError);  // leaves the directory
  TempDir empty;
  EXPECT_THROW(Checkpoint::open(empty.str()), CheckpointError);
}

// The shipped embedded model: every tensor the Qwen3 forward pass needs, with the shape config.json
// implies, in BF16.
TEST(ShippedModel, TensorsMatchConfig) {
  const std::string dir = std::string(MINIMAKV_SOURCE_DIR) + "/models/minima-qwen3-23m";
  const ModelConfig cfg = load_config(dir);
  EXPECT_EQ(cfg.family, Family::kQwen3);
  EXPECT_EQ(cfg.head_dim, 128);
  EXPECT_GE(cfg.num_attention_heads / cfg.num_key_value_heads, 2);
  EXPECT_GE(cfg.max_position_embeddings, 16384);
  const Checkpoint ck = Checkpoint::open(dir);
  const int64_t H = cfg.hidden_size, D = cfg.head_dim, I = cfg.intermediate_size;
  auto expect = [&](const std::string& n, std::vector<int64_t> shape) {
    ASSERT_TRUE(ck.has(n)) << n;
    EXPECT_EQ(ck.tensor(n).shape, shape) << n;
    EXPECT_EQ(ck.tensor(n).dtype, DType::kBF16) << n;
  };
  expect("model.embed_tokens.weight", {cfg.vocab_size, H});
  expect("model.norm.weight", {H});
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expect(p + "self_attn.q_proj.weight", {cfg.num_attention_heads * D, H});
    expect(p + "self_attn.k_proj.weight", {cfg.num_key_value_heads * D, H});
    expect(p + "self_attn.v_proj.weight", {cfg.num_key_value_heads * D, H});
    expect(p + "self_attn.o_proj.weight", {H, cfg.num_attention_heads * D});
    expect(p + "self_attn.q_norm.weight", {D});
    expect(p + "self_attn.k_norm.weight", {D});
    expect(p + "mlp.gate_proj.weight", {I, H});
    expect(p + "mlp.up_proj.weight", {I, H});
    expect(p + "mlp.down_proj.weight", {H, I});
    expect(p + "input_layernorm.weight", {H});
    expect(p + "post_attention_layernorm.weight", {H});
  }
  EXPECT_TRUE(cfg.tie_word_embeddings);
  EXPECT_FALSE(ck.has("lm_head.weight"));
  size_t total = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") {
      EXPECT_LE(e.file_size(), 16u << 20) << e.path();
      total += e.file_size();
    }
  EXPECT_LE(total, 48u << 20);
}

TEST(Config, LlamaWithRopeScalingAndDefaults) {
  const std::string text = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 100, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, "eos_token_id": [5, 7]})";
  const ModelConfig c = parse_config(text, "config.json");
  EXPECT_EQ(c.family, Family::kLlama);
  EXPECT_EQ(c.head_dim, 16);  // hidden / heads
  EXPECT_TRUE(c.rope_scaling.llama3);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{5, 7}));
  EXPECT_FALSE(c.qk_norm);
  EXPECT_THROW(parse_config(R"({"architectures": ["GPT2LMHeadModel"]})", "c.json"), ConfigError);
  EXPECT_THROW(parse_config(R"({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 10})", "c.json"), ConfigError);
  EXPECT_THROW(parse_config("{", "c.json"), ConfigError);
  try {
    parse_config(R"({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 10, "hidden_size": 8,
      "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 3, "num_key_value_heads": 2})",
                 "c.json");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of num_key_value_heads"), std::string::npos);
  }
}

// A field of the wrong JSON type or out of range is an error naming the field: never replaced by the
// default (a string "0.5" for rms_norm_eps used to run with 1e-6), never a misleading message.
TEST(Config, WrongTypesAndRangesNameTheField) {
  const auto base = nlohmann::json::parse(R"({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 100,
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2})");
  ASSERT_NO_THROW(parse_config(base.dump(), "c.json"));
  auto expect_named = [&](const char* key, const nlohmann::json& value, const std::string& fragment) {
    auto j = base;
    j[key] = value;
    try {
      parse_config(j.dump(), "c.json");
      ADD_FAILURE() << key << " = " << value.dump() << " was accepted";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::string("'") + key + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
      EXPECT_NE(msg.find("c.json"), std::string::npos) << msg;
    }
  };
  expect_named("rms_norm_eps", "0.5", "must be a number");
  expect_named("rms_norm_eps", 0.0, "must be positive");
  expect_named("rope_theta", "abc", "must be a number");
  expect_named("rope_theta", -1.0, "must be positive");
  expect_named("hidden_size", 64.5, "must be an integer");
  expect_named("hidden_size", 64.0, "must be an integer");
  expect_named("hidden_size", "64", "must be an integer");
  expect_named("num_hidden_layers", -2, "non-negative");
  expect_named("vocab_size", true, "must be an integer");
  expect_named("max_position_embeddings", int64_t{1} << 40, "larger than");
  expect_named("tie_word_embeddings", "yes", "must be true or false");
  expect_named("eos_token_id", "2", "token id");
  expect_named("eos_token_id", nlohmann::json::array({1, "x"}), "token id");
  expect_named("bos_token_id", -1, "token id");
  expect_named("rope_scaling", "llama3", "must be an object");
  auto j = base;
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"factor", "8"}};
  EXPECT_THROW(parse_config(j.dump(), "c.json"), ConfigError);
  j["rope_parameters"] = {{"rope_type", 3}};
  EXPECT_THROW(parse_config(j.dump(), "c.json"), ConfigError);
  // Numbers of the right type still parse, integers included where floats are expected.
  j = base;
  j["rms_norm_eps"] = 1;
  j["rope_theta"] = 1000000;
  EXPECT_DOUBLE_EQ(parse_config(j.dump(), "c.json").rms_norm_eps, 1.0);
}

}  // namespace
}  // namespace minimakv::model

namespace minimakv::model {
namespace {

TEST(CheckpointIndex, ParsesTheWeightMapAndRejectsEscapesAndMalformedText) {
  const auto m = parse_checkpoint_index(
      R"({"metadata": {"total_size": 8}, "weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})", "index.json");
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(m.at("b"), "s2.safetensors");
  for (const char* bad :
       {R"({"weight_map": {"a": "../x.safetensors"}})", R"({"weight_map": {"a": "dir/x.safetensors"}})",
        R"({"weight_map": {"a": ""}})", R"({"weight_map": {"a": 3}})", R"({"weight_map": []})", R"([1, 2])",
        R"({"weight_map": {"a": "x")", "", R"({"weight_map": {"a": "s1.safetensors", "a": "s2.safetensors"}})"}) {
    try {
      parse_checkpoint_index(bad, "index.json");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("index.json"), std::string::npos) << "the error names the file";
    }
  }
}

}  // namespace
}  // namespace minimakv::model
