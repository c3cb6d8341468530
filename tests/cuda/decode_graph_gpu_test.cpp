// A decode step captured once in a CUDA graph and replayed after the page mix, the page ids and the
// lengths changed through the staged plan buffers: every replay matches the fp64 reference.
#include <cuda_runtime.h>

#include "gpu_pages.h"
#include "minimakv/attention/reference.h"
#include "test_util.h"

namespace minimakv {
namespace {

using codec::PageFormat;

// early_plan_copy: the captured plan copy starts from an event recorded where the capture begins (a
// root of the graph on the workspace's side stream, as the CUDA backend's step graphs capture it).
void replay_after_changes(bool early_plan_copy) {
  MINIMAKV_SEED_TRACE();
  auto rng = testing::rng_for_test();
  const codec::PageGeometry geo{64, 2, 128};
  const int q_heads = 8, d = 128, max_batch = 3;
  const cuda::DecodeShape shape{q_heads, 2, d, 64, 0.0f};
  cuda::DecodeWorkspace ws(shape, max_batch, 256, 256);
  const auto signs = cuda::upload_rotation_signs(1, 2, d, codec::kDefaultRotationSeed);
  const size_t per = static_cast<size_t>(q_heads) * d;
  cuda::DeviceArray<float> dq(max_batch * per), dout(max_batch * per);
  cuda::AttentionBuffers io{dq.get(), signs.get(), dout.get()};
  cudaStream_t st;
  cuda::check(cudaStreamCreate(&st), "stream");
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t begun;
  cuda::check(cudaEventCreateWithFlags(&begun, cudaEventDisableTiming), "event");
  std::normal_distribution<float> nd(0.0f, 1.0f);
  // Three rounds with different lengths and mixes; the graph is captured in round 0 only. The pool
  // views must stay the same, so all rounds share one pool big enough for every round.
  const std::vector<std::vector<int>> lens{{900, 64, 1}, {3000, 700, 129}, {65, 4000, 2}};
  size_t pages = 0;
  for (const auto& r : lens)
    for (int n : r) pages += (n + 63) / 64;
  auto all =
      testing::make_gpu_pages(rng, geo, {static_cast<int>(pages * 64)}, [](int, int, int) { return PageFormat::kFp8; });
  for (size_t round = 0; round < lens.size(); ++round) {
    const int mix = static_cast<int>(round);
    auto s = testing::make_gpu_pages(rng, geo, lens[round], [mix](int, int p, int) {
      return mix == 0 ? PageFormat::kFp8 : (p + mix) % 3 == 0 ? PageFormat::kBf16 : PageFormat::kTq3;
    });
    // Copy this round's pages into the shared pool at fresh ids and re-point the plan there.
    std::vector<std::vector<cuda::PageRef>> refs = s.seqs;
    uint32_t next = 1 + static_cast<uint32_t>(round * (pages / lens.size() + 40));
    for (auto& seq : refs)
      for (auto& r : seq) {
        std::vector<uint8_t> bytes(s.pool->layout(r.format).bytes());
        s.pool->download(r.format, r.page_id, bytes);
        r.page_id = next++ % static_cast<uint32_t>(all.pool->capacity() - 1) + 1;
        all.pool->upload(r.format, r.page_id, bytes);
      }
    const auto plan = cuda::make_decode_plan(refs, shape, 128, false);
    ws.stage(plan, all.pool->views());
    std::vector<float> q(max_batch * per);
    for (auto& x : q) x = 2.0f * nd(rng);
    cuda::check(cudaMemcpy(dq.get(), q.data(), dq.bytes(), cudaMemcpyHostToDevice), "q");
    cuda::check(cudaMemset(dout.get(), 0xff, dout.bytes()), "poison");
    if (round == 0) {
      cudaGraph_t graph;
      cuda::check(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), "capture");
      cuda::check(cudaEventRecord(begun, st), "capture begins");
      ws.launch(all.pool->views(), io, st, cuda::DecodeWorkspace::LaunchSize::kCapacity,
                early_plan_copy ? begun : nullptr);
      cuda::check(cudaStreamEndCapture(st, &graph), "end capture");
      cuda::check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
      cuda::check(cudaGraphDestroy(graph), "graph destroy");
    }
    cuda::check(cudaGraphLaunch(exec, st), "replay");
    cuda::check(cudaStreamSynchronize(st), "sync");
    std::vector<float> out(max_batch * per);
    cuda::check(cudaMemcpy(out.data(), dout.get(), dout.bytes(), cudaMemcpyDeviceToHost), "out");
    for (size_t b = 0; b < lens[round].size(); ++b) {
      const auto in = s.layer_input(static_cast<int>(b), q_heads);
      const attention::QueryBlock qb{{q.data() + b * per, per}, 1, static_cast<uint32_t>(lens[round][b] - 1)};
      const auto ref = attention::attend_reference(in, qb);
      EXPECT_LE(testing::rel_l2(out.data() + b * per, ref.out.data(), per), 2e-5) << "round " << round << " seq " << b;
    }
  }
  cudaGraphExecDestroy(exec);
  cudaEventDestroy(begun);
  cudaStreamDestroy(st);
}

TEST(GpuDecodeGraph, ReplayAfterChangingMixAndLengthsMatchesReference) { replay_after_changes(false); }

TEST(GpuDecodeGraph, ReplayWithThePlanCopyAsAGraphRootMatchesReference) { replay_after_changes(true); }

}  // namespace
}  // namespace minimakv
