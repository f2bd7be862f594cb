#include "formats/jpeg_header.h"
