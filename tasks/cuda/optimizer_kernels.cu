// The optimizer steps of the CUDA backend (kernels.h: sgd_step, adam_step), each rounding the
// host loop's operations in its order (tasks/optim/sgd.h, tasks/optim/adam.h), so a layer stepped
// on the device gets the host step's bits.

#include <cmath>

#include "tasks/cuda/kernels.h"
#include "tasks/cuda/launch.cuh"

namespace gradmesh::tasks::cuda::kernels {
namespace {

using detail::blocks_for;
using detail::kThreads;
using detail::launched;

// Sgd::step (tasks/optim/sgd.h, sgd_update): the _rn intrinsics round each operation on its own,
// so nvcc does not fuse them into FMAs and every element gets the host loop's bits.
__global__ void sgd_step_kernel(float* w, const float* g, float* velocity, std::size_t n, float lr,
                                float momentum, float weight_decay) {
  GM_FOR(i, n) {
    const float wi = w[i];
    const float gi = __fadd_rn(g[i], __fmul_rn(weight_decay, wi));
    const float vi = __fadd_rn(__fmul_rn(momentum, velocity[i]), gi);
    velocity[i] = vi;
    w[i] = __fsub_rn(wi, __fmul_rn(lr, vi));
  }
}

// adam_update (tasks/optim/adam.h): the host loop's operations in its order, each rounded alone.
__global__ void adam_step_kernel(float* w, const float* g, float* m, float* v, std::size_t n,
                                 float lr, float wd, float b1, float b2, float eps, bool decoupled,
                                 float step_size, float root_c2) {
  const float one_b1 = __fsub_rn(1.0f, b1), one_b2 = __fsub_rn(1.0f, b2);
  GM_FOR(i, n) {
    float wi = w[i];
    float gi = g[i];
    if (decoupled) {
      wi = __fsub_rn(wi, __fmul_rn(__fmul_rn(lr, wd), wi));
    } else {
      gi = __fadd_rn(gi, __fmul_rn(wd, wi));
    }
    const float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(one_b1, gi));
    const float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(one_b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float denominator = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), root_c2), eps);
    w[i] = __fsub_rn(wi, __fdiv_rn(__fmul_rn(step_size, mi), denominator));
  }
}

}  // namespace

cudaError_t adam_step(float* w, const float* g, float* m, float* v, std::size_t n, float lr,
                      float weight_decay, float beta1, float beta2, float eps, bool decoupled,
                      float c1, float c2, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  // The host's scalars: lr / c1 and sqrt(c2), each one rounded float operation.
  const float step_size = lr / c1;
  const float root_c2 = std::sqrt(c2);
  adam_step_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      w, g, m, v, n, lr, weight_decay, beta1, beta2, eps, decoupled, step_size, root_c2);
  return launched();
}

cudaError_t sgd_step(float* w, const float* g, float* velocity, std::size_t n, float lr,
                     float momentum, float weight_decay, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  sgd_step_kernel<<<blocks_for(n), kThreads, 0, stream>>>(w, g, velocity, n, lr, momentum,
                                                          weight_decay);
  return launched();
}

}  // namespace gradmesh::tasks::cuda::kernels
