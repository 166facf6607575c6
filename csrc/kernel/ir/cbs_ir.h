/* The region-splitting engine's compiler pass (cbs_ir.c), built as its own
 * shared object (mkpy/_cbs_ir*.so, linked with LLVM 15) that jit.c loads on
 * the first cooperative kernel, so that `import mkpy` does not load LLVM. */
#ifndef MKK_CBS_IR_H
#define MKK_CBS_IR_H

#include <stddef.h>

/* Reads the kernel's bitcode, adds the region-split entry points and writes
 * an object file for this machine. Returns 0, or -1 with the reason in `why`
 * (the kernel then runs on fibers). */
int mkk_cbs_build(const char *bc_path, const char *obj_path, char *why, size_t whyn);
typedef int (*mkk_cbs_build_fn)(const char *bc_path, const char *obj_path, char *why, size_t whyn);
#define MKK_CBS_BUILD_SYMBOL "mkk_cbs_build"

#endif
