/* mx.fast.cuda_kernel's front end: the kernel object (an mkk_kernel with
 * `cuda` set, sharing metal_kernel's call parsing, lazy node, memo of the
 * generated text per call signature and mx.compile's params copy) and the
 * CUDA program MLX 0.32's CUDA back-end writes around the user's `source`
 * (mlx/backend/cuda/custom_kernel.cpp's build_kernel), byte for byte:
 *
 *   #include "mlx/backend/cuda/device/utils.cuh"   (MLX's default header)
 *   #include <cooperative_groups.h>
 *   <header>namespace mlx::core::cu {
 *   namespace cg = cooperative_groups;
 *   __global__ void custom_kernel_<name><template values>(
 *       const T* in, [const __grid_constant__ Shape in_shape,] ...  T* out) {
 *     constexpr int N = 4; using T = float; ...
 *   <source>
 *   }
 *   } // namespace mlx::core::cu
 *
 * The CUDA back-end (backend/cuda/user.c) compiles it with NVRTC and
 * launches it; docs/design.md, "mx.fast.cuda_kernel". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"

mkk_kernel *mkk_cuda_kernel_new(const char *name, int ninputs, const char *const *input_names, int noutputs,
                                const char *const *output_names, const char *source, const char *header,
                                bool ensure_row_contiguous, int shared_memory) {
    if (noutputs == 0) {
        mk_error_set(MK_ERR_VALUE, "[custom_kernel] Must specify at least one output.");
        return NULL;
    }
    /* metal_kernel's object with no Metal checks: shape_info is the same substring search */
    mkk_kernel *k = mkk_kernel_new(name, ninputs, input_names, noutputs, output_names, source, header,
                                   ensure_row_contiguous, false, MKK_MATH_SAFE, true);
    if (!k) return NULL;
    k->cuda = true;
    k->prints = false; /* CUDA's printf goes to the driver's stdout */
    k->shared_memory = shared_memory;
    return k;
}

const char *mkk_cuda_type(mk_dtype t) {
    switch (t) {
    case MK_BOOL: return "bool";
    case MK_UINT8: return "uint8_t";
    case MK_UINT16: return "uint16_t";
    case MK_UINT32: return "uint32_t";
    case MK_UINT64: return "uint64_t";
    case MK_INT8: return "int8_t";
    case MK_INT16: return "int16_t";
    case MK_INT32: return "int32_t";
    case MK_INT64: return "int64_t";
    case MK_FLOAT16: return "__half";
    case MK_FLOAT32: return "float";
    case MK_FLOAT64: return "double";
    case MK_BFLOAT16: return "__nv_bfloat16";
    case MK_COMPLEX64: return "mlx::core::cu::complex64_t";
    default: return "unknown";
    }
}

int mkk_cuda_generate(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, char **program_out,
                      char **name_out) {
    mkk_sbuf name = {0}, src = {0};
    *program_out = *name_out = NULL;
    /* the name: custom_kernel_<name> and each template value (MLX's template_arguments_hash:
     * _<int>, _t / _f, _<type string>) */
    mkk_sb(&name, "custom_kernel_");
    mkk_sb(&name, k->name);
    for (int i = 0; i < c->ntemplate; i++) {
        const mkk_targ *t = &c->templ[i];
        if (t->kind == MKK_TARG_INT)
            mkk_sbf(&name, "_%lld", (long long)t->value);
        else if (t->kind == MKK_TARG_BOOL)
            mkk_sb(&name, t->value ? "_t" : "_f");
        else
            mkk_sbf(&name, "_%s", mk_dtypes[t->value].msl_name);
    }
    if (name.failed) goto nomem;

    mkk_sb(&src, "\n#include \"mlx/backend/cuda/device/utils.cuh\"\n\n#include <cooperative_groups.h>\n\n");
    mkk_sb(&src, k->header);
    mkk_sb(&src, "namespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n__global__ void ");
    mkk_sb(&src, name.s);
    mkk_sb(&src, "(\n");
    for (int i = 0; i < k->ninputs; i++) {
        const char *nm = k->input_names[i];
        mkk_sbf(&src, "    const %s* %s,\n", mkk_cuda_type(inputs[i]->dtype), nm);
        if (inputs[i]->ndim > 0) {
            if (k->shape_info[i][0]) mkk_sbf(&src, "    const __grid_constant__ Shape %s_shape,\n", nm);
            if (k->shape_info[i][1]) mkk_sbf(&src, "    const __grid_constant__ Strides %s_strides,\n", nm);
            if (k->shape_info[i][2]) mkk_sbf(&src, "    const __grid_constant__ int %s_ndim,\n", nm);
        }
    }
    for (int i = 0; i < k->noutputs; i++)
        mkk_sbf(&src, "    %s* %s%s", mkk_cuda_type(c->output_dtypes[i]), k->output_names[i],
                i < k->noutputs - 1 ? ",\n" : ") {\n");
    if (c->ntemplate) {
        for (int i = 0; i < c->ntemplate; i++) {
            const mkk_targ *t = &c->templ[i];
            if (t->kind == MKK_TARG_INT)
                mkk_sbf(&src, "  constexpr int %s = %lld;\n", t->name, (long long)t->value);
            else if (t->kind == MKK_TARG_BOOL)
                mkk_sbf(&src, "  constexpr bool %s = %s;\n", t->name, t->value ? "true" : "false");
            else
                mkk_sbf(&src, "  using %s = %s;\n", t->name, mkk_cuda_type((mk_dtype)t->value));
        }
        mkk_sb(&src, "\n");
    }
    mkk_sb(&src, k->source);
    mkk_sb(&src, "\n}\n\n} // namespace mlx::core::cu\n");
    if (src.failed) goto nomem;
    *program_out = src.s;
    *name_out = name.s;
    return 0;
nomem:
    free(name.s);
    free(src.s);
    mk_nomem();
    return -1;
}
