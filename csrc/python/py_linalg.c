/* Module functions of the linalg family. */
#include "mkpy.h"

PyMethodDef mkpy_linalg_functions[] = {
    {NULL},
};
