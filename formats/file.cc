#include "formats/file.h"
