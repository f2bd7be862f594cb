#include "formats/jpeg_codec.h"
