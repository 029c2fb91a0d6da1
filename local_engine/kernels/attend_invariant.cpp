#include "local_engine/kernels/attend_invariant.h"

#include "local_engine/kernels/kernels.h"

namespace ferry::kernels {

bool attend_invariant_supported(int64_t head_dim) {
  return active_isa() == Isa::kAvx512 && head_dim > 0 && head_dim % 16 == 0;
}

void attend_group_invariant(int64_t head_dim, int64_t n_q, const float* q, int64_t q_stride,
                            const uint16_t* keys, int64_t key_stride, const uint16_t* values,
                            int64_t value_stride, int64_t n_keys, float scale, float* out,
                            int64_t out_stride, float softcap) {
#if defined(__x86_64__) || defined(__i386__)
  detail::attend_group_invariant_avx512(head_dim, n_q, q, q_stride, keys, key_stride, values,
                                        value_stride, n_keys, scale, out, out_stride, softcap);
#else
  (void)head_dim, (void)n_q, (void)q, (void)q_stride, (void)keys, (void)key_stride;
  (void)values, (void)value_stride, (void)n_keys, (void)scale, (void)out, (void)out_stride;
  (void)softcap;
#endif
}

}  // namespace ferry::kernels
