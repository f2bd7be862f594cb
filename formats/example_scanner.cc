#include "formats/example_scanner.h"
