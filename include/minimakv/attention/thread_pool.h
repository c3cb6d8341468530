// A persistent pool of worker threads for data-parallel loops (attention over (query, KV head, split)).
//
// Owns: its threads for its whole lifetime. parallel_for(n, fn) runs fn(i) for i in [0, n) across the
// workers and the calling thread and returns when all are done; exceptions are rethrown in the caller.
// One parallel_for at a time per pool (calls are serialised).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace minimakv::attention {

class ThreadPool {
 public:
  explicit ThreadPool(unsigned threads = std::thread::hardware_concurrency());
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }
  void parallel_for(size_t n, const std::function<void(size_t)>& fn);

 private:
  void worker_loop();
  void run_items();
  std::vector<std::thread> workers_;
  std::mutex call_mu_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t n_ = 0, next_ = 0, active_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace minimakv::attention
