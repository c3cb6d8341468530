// The CUDA module's host-side argument check: plans, shapes, capacities and buffers that do not fit are
// refused with std::invalid_argument before anything is staged or launched.
//
// Invariant: a literal message is not turned into a string unless it is thrown (checks run per split and
// page of a plan).
#pragma once

#include <stdexcept>
#include <string>

namespace minimakv::cuda {

inline void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}
inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

}  // namespace minimakv::cuda
