#include "formats/image_ops.h"
