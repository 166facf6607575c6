/* Module functions of the random family. */
#include "mkpy.h"

PyMethodDef mkpy_random_functions[] = {
    {NULL},
};
