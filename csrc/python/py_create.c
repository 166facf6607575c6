/* Module functions of the create family. */
#include "mkpy.h"

PyMethodDef mkpy_create_functions[] = {
    {NULL},
};
