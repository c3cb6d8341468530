// Summaries of evaluation runs as Markdown tables and JSON.
//
// Owns: turning records into per-task / macro accuracy with paired differences against bf16 (95%
// bootstrap CIs, exact McNemar p), KV bytes per live token per tier with compression ratios, CPU speed
// medians, KL tables and memory projections. Pure functions of the records.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "minimakv/eval/runner.h"

namespace minimakv::eval {

std::string niah_markdown(const std::vector<NiahRecord>& records, uint64_t seed);
std::string kl_markdown(const std::vector<KlRecord>& records);
std::string memory_markdown(const std::vector<MemoryRecord>& records);

nlohmann::json to_json(const std::vector<NiahRecord>& records, uint64_t seed);

// The records of a to_json(NiahRecord) document, back. Throws std::invalid_argument naming the first
// missing or mistyped field.
std::vector<NiahRecord> niah_records_from_json(const nlohmann::json& niah);
// Records of several runs (shards of one protocol) as one set; throws std::invalid_argument when two
// runs hold the same (length, task, arm, example), since a paired statistic would count it twice.
std::vector<NiahRecord> merge_niah_records(const std::vector<std::vector<NiahRecord>>& runs);
nlohmann::json to_json(const std::vector<KlRecord>& records);
nlohmann::json to_json(const std::vector<MemoryRecord>& records);

// An evaluation document as the text of its file: invalid UTF-8 in a string becomes U+FFFD. A model's
// output is decoded from byte-level tokens, and a generation may stop inside a multi-byte character
// (or emit a stray continuation byte); the run must still write its records.
std::string json_text(const nlohmann::json& document);

}  // namespace minimakv::eval
