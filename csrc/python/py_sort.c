/* Module functions of the sort family. */
#include "mkpy.h"

PyMethodDef mkpy_sort_functions[] = {
    {NULL},
};
