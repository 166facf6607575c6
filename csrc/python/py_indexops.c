/* Module functions of the indexops family. */
#include "mkpy.h"

PyMethodDef mkpy_indexops_functions[] = {
    {NULL},
};
