#pragma once
// gradmesh's own kernels on oneDNN's blocked layouts nChw8c and nChw16c (tasks::Layout::kBlocked8
// and kBlocked16), host memory: batch normalization (SyncBN's path on a blocked activation;
// otherwise oneDNN's primitives run it) and global average pooling, for the chains the Model keeps
// blocked (issue 55).

#include <cstddef>

namespace gradmesh::tasks::cpu {

// block: the layout's channels a block, 8 or 16 (channel_block(layout); ContractError otherwise).
// x, y, dx, dy: samples x channels / block x spatial x block floats, channels % block == 0 (the
// Model gives a blocked layout only then). Each computes what the CpuBackend kernel of the same
// name computes on NCHW, every channel's sums in the same order (per sample, then the samples in
// order), so batch normalization gives the same bits in either layout; the channels of a block are
// the lanes of one vector. Split by channel block over set_threads()' arena: the same bits for
// any thread count. Thread safety: reentrant.
void batch_norm_statistics_blocked(std::size_t block, const float* x, std::size_t samples,
                                   std::size_t channels, std::size_t spatial, float* mean,
                                   float* var);
void batch_norm_forward_blocked(std::size_t block, const float* x, std::size_t samples,
                                std::size_t channels, std::size_t spatial, const float* mean,
                                const float* inv_std, const float* gamma, const float* beta,
                                float* y);
void batch_norm_backward_blocked(std::size_t block, const float* x, const float* dy,
                                 std::size_t samples, std::size_t channels, std::size_t spatial,
                                 const float* mean, const float* inv_std, const float* gamma,
                                 float* dx, float* dgamma, float* dbeta);
/// y (samples x channels, NCHW) = each channel's mean over its spatial positions (summed in
/// order, then times 1 / spatial).
void global_avg_pool_forward_blocked(std::size_t block, const float* x, std::size_t samples,
                                     std::size_t channels, std::size_t spatial, float* y);
/// dx (blocked) = dy[n, c] / spatial at every position of channel c of sample n.
void global_avg_pool_backward_blocked(std::size_t block, const float* dy, std::size_t samples,
                                      std::size_t channels, std::size_t spatial, float* dx);

}  // namespace gradmesh::tasks::cpu
