/* Module functions of the fastops family. */
#include "mkpy.h"

PyMethodDef mkpy_fastops_functions[] = {
    {NULL},
};
