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
nlohmann::json to_json(const std::vector<KlRecord>& records);
nlohmann::json to_json(const std::vector<MemoryRecord>& records);

}  // namespace minimakv::eval
