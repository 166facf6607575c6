/* Module functions of the fast family. */
#include "mkpy.h"

PyMethodDef mkpy_fast_functions[] = {
    {NULL},
};
