/* The CPU back-end's entry points beside its table (cpu.c). */
#ifndef MKB_CPU_H
#define MKB_CPU_H

#include "backend/backend.h"

/* One metal_kernel call on the CPU (launch.c): the table's kernel_eval. */
int mkb_cpu_kernel_eval(mkk_kernel *k, mkk_call *c, mk_array *const *in, mk_array *const *out,
                        const char *generated, const char *kname, const mkk_launch *plan, uint64_t plan_total);
/* Compiles without running (backend.h's kernel_compile). */
int mkb_cpu_kernel_compile(mkk_kernel *k, mkk_call *c, mk_array *const *inputs, const char *generated,
                           const char *kernel_name);

#endif
