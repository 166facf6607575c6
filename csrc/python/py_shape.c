/* Module functions of the shape family. */
#include "mkpy.h"

PyMethodDef mkpy_shape_functions[] = {
    {NULL},
};
