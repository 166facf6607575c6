/* Module functions of the reduce family. */
#include "mkpy.h"

PyMethodDef mkpy_reduce_functions[] = {
    {NULL},
};
