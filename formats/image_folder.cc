#include "formats/image_folder.h"
