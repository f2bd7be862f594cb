#include "formats/crc32c.h"
