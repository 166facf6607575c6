/* The region-splitting engine's compiler pass (cbs_ir.c), built with
 * cbs_main.c into the program mkpy/mkpy-cbs-pass (linked with LLVM 15),
 * which jit.c runs like the compiler: `import mkpy` never loads LLVM, and the
 * pass runs outside the user's process. */
#ifndef MKK_CBS_IR_H
#define MKK_CBS_IR_H

#include <stddef.h>

/* Reads the kernel's bitcode, adds the region-split entry points and writes
 * an object file for this machine. Returns 0, or -1 with the reason in `why`
 * (the kernel then runs on fibers). */
int mkk_cbs_build(const char *bc_path, const char *obj_path, char *why, size_t whyn);
/* The checker mode's instrumentation (check_ir.c; mkpy-cbs-pass --check
 * BITCODE OBJECT). Returns 0, or -1 with the reason in `why`. */
int mkk_check_build(const char *bc_path, const char *obj_path, char *why, size_t whyn);
/* The fiber engine's object, its runtime points in the program's order
 * (mkpy-cbs-pass --fibers BITCODE OBJECT). Returns 0, or -1 with the reason
 * in `why` (the kernel is then built without the pass, in the text's order). */
int mkk_fiber_build(const char *bc_path, const char *obj_path, char *why, size_t whyn);
#define MKK_CBS_PASS_PROGRAM "mkpy-cbs-pass"

#endif
