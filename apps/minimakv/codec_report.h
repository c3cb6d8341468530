// `minimakv codec-report`: measures the KV codecs on fresh random data at run time.
#pragma once

#include <cstdint>

namespace minimakv::app {

struct CodecReportOptions {
  uint64_t seed = 0;
  int vectors = 4000;
  bool json = false;
};

int run_codec_report(const CodecReportOptions& opt);

}  // namespace minimakv::app
