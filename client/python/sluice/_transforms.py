"""sluice.transforms(): a transform list (sluice.v1.TransformOp, config.proto) written from Python
dicts as the textproto lines a server config's `pipeline { ... }` or `transform_sets { ... }`
takes.
"""
import os

from google.protobuf import descriptor, json_format, text_format

from sluice.v1 import config_pb2


def transforms(ops):
    """The textproto of a `transforms { ... }` list, one line per op, from a list of one-key dicts
    {op: parameters} as config.proto's TransformOp names them:

        sluice.transforms([{"random_resized_crop": {"scale": [0.08, 1]}}, {"flip": {}},
                           {"normalize": {"mean": [0.485, 0.456, 0.406],
                                          "std": [0.229, 0.224, 0.225]}},
                           {"output": {"dtype": "BFLOAT16", "layout": "NCHW"}}])

    Enum values may drop their prefix and case ("bfloat16" for DTYPE_BFLOAT16, "imagenet_train"
    for PRESET_IMAGENET_TRAIN). Checks names and types only: the server checks the list itself
    (ranges, order) when it loads the config. ValueError naming the op's index and the
    offending key.
    """
    if isinstance(ops, dict):
        raise ValueError("transforms takes a list of one-key dicts, e.g. [{'flip': {}}], not "
                         "a dict")
    lines = []
    for i, op in enumerate(ops):
        if not isinstance(op, dict) or len(op) != 1:
            raise ValueError("transforms[%d]: expected a dict of one op, e.g. {'flip': {}}, "
                             "got %r" % (i, op))
        name = next(iter(op))
        message = config_pb2.TransformOp()
        try:
            json_format.ParseDict(_with_enum_names(message.DESCRIPTOR, op), message)
        except json_format.ParseError as e:
            raise ValueError("transforms[%d] (%s): %s" % (i, name, e)) from None
        lines.append("transforms { %s }" % text_format.MessageToString(
            message, as_one_line=True).strip())
    return "\n".join(lines)


def _field(message_type, key):
    return message_type.fields_by_name.get(key) or next(
        (f for f in message_type.fields if f.json_name == key), None)


def _enum_name(enum_type, value):
    """The full name of an enum value given as it is, in any case, or without its prefix."""
    if not isinstance(value, str):
        return value
    names = [v.name for v in enum_type.values]
    prefix = os.path.commonprefix(names)
    prefix = prefix[:prefix.rfind("_") + 1] if len(names) > 1 else ""
    for candidate in (value, value.upper(), prefix + value.upper()):
        if candidate in names:
            return candidate
    return value  # json_format names it as unknown


def _with_enum_names(message_type, values):
    """`values` (a dict for message_type) with short enum names made full, recursively; keys it
    does not know are left for json_format to name."""
    if not isinstance(values, dict):
        return values
    out = {}
    for key, value in values.items():
        field = _field(message_type, key)
        if field is None:
            out[key] = value
            continue
        repeated = field.label == descriptor.FieldDescriptor.LABEL_REPEATED
        if repeated and not isinstance(value, (list, tuple)):
            value = [value]  # one value for a repeated field, as textproto and torchvision take
        items = list(value) if repeated else None
        if field.type == descriptor.FieldDescriptor.TYPE_ENUM:
            fix = lambda v: _enum_name(field.enum_type, v)  # noqa: E731
        elif field.type == descriptor.FieldDescriptor.TYPE_MESSAGE:
            fix = lambda v: _with_enum_names(field.message_type, v)  # noqa: E731
        else:
            out[key] = items if items is not None else value
            continue
        out[key] = [fix(v) for v in items] if items is not None else fix(value)
    return out
