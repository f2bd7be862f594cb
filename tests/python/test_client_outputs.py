"""What a transform set makes of batches, as the Python client delivers it: images of the set's
dtype (uint8, float16, bfloat16, float32) and layout (NHWC, NCHW), zero-copy, and mixed labels
(mixup, cutmix) as pairs or soft labels, through numpy, PyTorch and tf.data; and
sluice.transforms(), which writes transform lists for server configs.

First unit tests on synthetic Batch messages (every decode path and dtype), then end-to-end tests
against a real `sluice serve` whose dataset offers transform sets.

Torch tests have "torch" in their names: ctest runs them in build/venv-torch (Debian's PyTorch,
no ml_dtypes: bfloat16 arrays are uint16 bits there) and the rest in build/venv (TensorFlow, with
ml_dtypes); in a venv without torch or TensorFlow those tests skip. So this file's name must not
contain "torch": `-k` matches module names too.
"""
import pickle

import grpc
import numpy as np
import pytest

import sluice
from client_support import Server, pooling_model
from sluice import _wire
from sluice.v1 import config_pb2, service_pb2

DTYPES = ["uint8", "float16", "bfloat16", "float32"]
LAYOUTS = ["NHWC", "NCHW"]
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _bfloat16_bits(values):
    """float32 values as bfloat16 bits (round to nearest even), as the server writes them."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _encode(values, dtype):
    """float32 values as the wire's bytes of `dtype`."""
    if dtype == "uint8":
        return np.asarray(values, dtype=np.uint8).tobytes()
    if dtype == "bfloat16":
        return _bfloat16_bits(values).astype("<u2").tobytes()
    return np.asarray(values, dtype={"float16": "<f2", "float32": "<f4"}[dtype]).tobytes()


def _message(dtype="uint8", layout="NHWC", n=2, h=3, w=4, mixed=None, weights=None,
             declared_dtype=None, declared_layout=None):
    """A serialized Batch of n images of h x w, values 0, 1, 2, ... in layout order, and those
    values (float32, shaped). declared_*: what the message says instead of dtype and layout."""
    shape = [n, 3, h, w] if layout == "NCHW" else [n, h, w, 3]
    values = np.arange(n * h * w * 3, dtype=np.float32).reshape(shape) % 251
    batch = service_pb2.Batch(shape=shape, labels=list(range(n)),
                              dtype=_wire.DTYPE_VALUES[declared_dtype or dtype],
                              layout=_wire.LAYOUT_VALUES[declared_layout or layout],
                              images=_encode(values, dtype))
    batch.position.epoch, batch.position.index = 1, 2
    if mixed is not None:
        batch.mixed_labels.extend(mixed)
    if weights is not None:
        batch.label_weights.extend(weights)
    return batch.SerializeToString(), values


def _as_float32(images, dtype):
    if dtype == "bfloat16":
        return (images.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return images.astype(np.float32)


# --- numpy: decode_batch -------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_batch_gives_images_of_every_dtype_and_layout_as_a_view(dtype, layout):
    message, values = _message(dtype, layout)
    batch, _ = sluice.decode_batch(message)
    assert batch.dtype == dtype and batch.layout == layout
    assert batch.images.shape == values.shape
    assert batch.images.shape == ((2, 3, 3, 4) if layout == "NCHW" else (2, 3, 4, 3))
    want = {"uint8": np.uint8, "float16": np.float16, "float32": np.float32}.get(dtype)
    if want is not None:
        assert batch.images.dtype == want
    else:
        # ml_dtypes' bfloat16 where importable (the TensorFlow venv), else its bits as uint16.
        assert batch.images.dtype.itemsize == 2 and batch.images.dtype != np.float16
        assert batch.images.dtype == np.uint16 or batch.images.dtype.name == "bfloat16"
    np.testing.assert_array_equal(_as_float32(batch.images, dtype), values)
    # Zero-copy: the images are the message's bytes, not a copy of them.
    assert not batch.images.flags.writeable and not batch.images.flags.owndata
    assert batch.images.base is not None
    assert batch.mixed_labels is None and batch.label_weights is None
    again = pickle.loads(pickle.dumps(batch))
    assert again.dtype == dtype and again.layout == layout
    np.testing.assert_array_equal(again.images, batch.images)


def test_a_batch_without_dtype_and_layout_is_uint8_nhwc_as_before():
    message = service_pb2.Batch(shape=[2, 3, 4, 3], labels=[0, 1],
                                images=bytes(72)).SerializeToString()
    batch, _ = sluice.decode_batch(message)
    assert batch.dtype == "uint8" and batch.layout == "NHWC"
    images, labels, position = batch  # still three fields
    assert images.dtype == np.uint8


def test_decode_batch_reads_mixed_labels_and_makes_soft_labels():
    message, _ = _message("bfloat16", "NCHW", n=3, mixed=[2, 0, 1], weights=[0.75, 1.0, 0.0])
    message_unpacked = message + b"".join(
        service_pb2.Batch(mixed_labels=[m]).SerializeToString() for m in (2, 0, 1)) + b"".join(
        service_pb2.Batch(label_weights=[w]).SerializeToString() for w in (0.75, 1.0, 0.0))
    batch, _ = sluice.decode_batch(message)
    assert batch.mixed_labels.dtype == np.int32 and batch.mixed_labels.tolist() == [2, 0, 1]
    assert batch.label_weights.dtype == np.float32
    assert batch.label_weights.tolist() == [0.75, 1.0, 0.0]
    soft = batch.soft_labels(4)
    assert soft.dtype == np.float32 and soft.shape == (3, 4)
    np.testing.assert_allclose(soft, [[0.75, 0, 0.25, 0], [0, 1, 0, 0], [0, 1, 0, 0]])
    assert pickle.loads(pickle.dumps(batch)).mixed_labels.tolist() == [2, 0, 1]
    # Protobuf appends repeated fields that come again: 6 values for 3 images.
    with pytest.raises(sluice.SluiceError, match="mixed_labels holds 6 values for 3 images"):
        sluice.decode_batch(message_unpacked)
    # Without mixing, soft labels are one-hot; a label outside the classes is named.
    plain, _ = sluice.decode_batch(_message(n=3)[0])
    np.testing.assert_array_equal(plain.soft_labels(3), np.eye(3, dtype=np.float32))
    with pytest.raises(ValueError, match=r"labels\[2\] is 2, outside the dataset's 2 classes"):
        plain.soft_labels(2)
    with pytest.raises(ValueError, match=r"mixed_labels\[1\] is 5"):
        sluice.soft_labels([0, 1], [1, 5], [0.5, 0.5], 4)
    with pytest.raises(ValueError, match=r"labels\[0\] is -1"):
        sluice.soft_labels(np.array([-1], dtype=np.int32), None, None, 4)


def _with(message, **fields):
    return message + service_pb2.Batch(**fields).SerializeToString()


@pytest.mark.parametrize("message, error", [
    (_with(_message()[0], dtype=7), "dtype 7 is not a known DType"),
    (_with(_message()[0], layout=3), "layout 3 is not a known Layout"),
    (_message("float32", declared_dtype="uint8")[0],
     "images holds 288 bytes, shape [2, 3, 4, 3] needs 72 (uint8)"),
    (_message("uint8", declared_dtype="float32")[0],
     "images holds 72 bytes, shape [2, 3, 4, 3] needs 288 (float32)"),
    (_message("bfloat16", "NCHW", h=2, declared_layout="NHWC")[0],
     "shape must be [N, H, W, 3] for layout NHWC, got [2, 3, 2, 4]"),
    (_message("float16", "NHWC", h=2, declared_layout="NCHW")[0],
     "shape must be [N, 3, H, W] for layout NCHW, got [2, 2, 4, 3]"),
    (_message(mixed=[1], weights=[0.5])[0], "mixed_labels holds 1 values for 2 images"),
    (_message(mixed=[1, 0], weights=[0.5, 0.5, 0.5])[0], "label_weights holds 3 values"),
    (_message(mixed=[1, 0])[0], "mixed_labels without label_weights"),
    (_message(weights=[0.5, 0.5])[0], "label_weights without mixed_labels"),
    (_message(mixed=[1, 0], weights=[0.5, float("nan")])[0], "label_weights[1] is nan"),
    (_message(mixed=[1, 0], weights=[float("inf"), 0.5])[0], "label_weights[0] is inf"),
    (_message(mixed=[1, 0], weights=[1.5, 0.5])[0], "label_weights[0] is 1.5, not in [0, 1]"),
    (_message(mixed=[1, 0], weights=[0.5, -0.25])[0], "label_weights[1] is -0.25"),
])
def test_decode_batch_refuses_outputs_that_disagree_naming_the_field(message, error):
    with pytest.raises(sluice.SluiceError) as e:
        sluice.decode_batch(message)
    assert e.value.code == grpc.StatusCode.DATA_LOSS
    assert error in e.value.message


# --- PyTorch and tf.data on synthetic batches ----------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_tensor_of_every_dtype_and_layout_shares_the_message(dtype, layout):
    torch = pytest.importorskip("torch")
    import sluice.torch
    message, values = _message(dtype, layout)
    batch, _ = sluice.decode_batch(message)
    tensor = sluice.torch._images_tensor(batch.images, False, batch.dtype)
    assert tensor.dtype == {"uint8": torch.uint8, "float16": torch.float16,
                            "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    assert tuple(tensor.shape) == values.shape
    assert tensor.data_ptr() == batch.images.ctypes.data  # zero-copy
    np.testing.assert_array_equal(tensor.float().numpy(), values)
    copied = sluice.torch._images_tensor(batch.images, True, batch.dtype)
    assert copied.dtype == tensor.dtype and copied.data_ptr() != tensor.data_ptr()
    assert torch.equal(copied, tensor)


def test_tf_signature_and_tensors_of_every_dtype_and_layout():
    tf = pytest.importorskip("tensorflow")
    import sluice.tf
    for dtype in DTYPES:
        for layout in LAYOUTS:
            spec = sluice.tf.output_signature(32, dtype=dtype, layout=layout)
            want = {"uint8": tf.uint8, "float16": tf.float16, "bfloat16": tf.bfloat16,
                    "float32": tf.float32}[dtype]
            shape = [None, 3, 32, 32] if layout == "NCHW" else [None, 32, 32, 3]
            assert spec[0].dtype == want and spec[0].shape.as_list() == shape
            message, values = _message(dtype, layout)
            batch, _ = sluice.decode_batch(message)
            ds = tf.data.Dataset.from_generator(
                lambda: iter([(batch.images, batch.labels)]),
                output_signature=sluice.tf.output_signature((3, 4), dtype=dtype, layout=layout))
            images, labels = next(iter(ds))
            assert images.dtype == want and tuple(images.shape) == values.shape
            np.testing.assert_array_equal(tf.cast(images, tf.float32).numpy(), values)
    mixed = sluice.tf.output_signature(32, True, mixes_labels=True)
    assert [s.dtype for s in mixed] == [tf.uint8, tf.int32, tf.int32, tf.float32, tf.bool]
    soft = sluice.tf.output_signature(32, mixes_labels=True, num_classes=4)
    assert soft[1] == tf.TensorSpec((None, 4), tf.float32) and len(soft) == 2


# --- sluice.transforms ---------------------------------------------------------------------------

def test_transforms_writes_textproto_that_the_config_parses():
    from google.protobuf import text_format
    text = sluice.transforms([
        {"random_resized_crop": {"scale": [0.08, 1]}}, {"flip": {}},
        {"color_jitter": {"brightness": [0.4], "order": "fixed"}},
        {"normalize": {"mean": MEAN, "std": STD}},
        {"output": {"dtype": "BFLOAT16", "layout": "NCHW"}}])
    assert len(text.splitlines()) == 5
    assert all(line.startswith("transforms {") for line in text.splitlines())
    pipeline = text_format.Parse(text, config_pb2.PipelineOptions())
    ops = [op.WhichOneof("op") for op in pipeline.transforms]
    assert ops == ["random_resized_crop", "flip", "color_jitter", "normalize", "output"]
    assert list(pipeline.transforms[0].random_resized_crop.scale) == [0.08, 1]
    assert pipeline.transforms[2].color_jitter.order == config_pb2.JITTER_ORDER_FIXED
    assert pipeline.transforms[4].output.dtype == config_pb2.DTYPE_BFLOAT16
    assert pipeline.transforms[4].output.layout == config_pb2.LAYOUT_NCHW
    preset = sluice.transforms([{"preset": "imagenet_train"}, {"mixup": {"alpha": 0.2}}])
    assert preset.splitlines()[0] == "transforms { preset: PRESET_IMAGENET_TRAIN }"


@pytest.mark.parametrize("ops, error", [
    ([{"flipp": {}}], r"transforms\[0\] \(flipp\): .*no field named \"flipp\""),
    ([{"flip": {}}, {"flip": {"horizontal": 0.5}}], r"transforms\[1\] \(flip\): .*\"horizontal\""),
    ([{"output": {"dtype": "BFLOAT17"}}], r"transforms\[0\] \(output\): .*dtype.*BFLOAT17"),
    ([{"resize": {"size": "big"}}], r"transforms\[0\] \(resize\): .*size"),
    ([{"flip": {}, "resize": {}}], r"transforms\[0\]: expected a dict of one op"),
    ({"flip": {}}, "a list of one-key dicts"),
])
def test_transforms_errors_name_the_offending_key(ops, error):
    with pytest.raises(ValueError, match=error):
        sluice.transforms(ops)


# --- against a real server with transform sets ----------------------------------------------------

# The dataset's transform sets: "bf16" is the default recipe normalized into bfloat16 NCHW (what
# a PyTorch model takes as it is), "f32" and "f16" the same in float32 NHWC and float16 NCHW,
# "mixup" the default recipe with mixup.
def _normalized(dtype, layout):
    return [{"preset": "imagenet_train"}, {"normalize": {"mean": MEAN, "std": STD}},
            {"output": {"dtype": dtype, "layout": layout}}]


SETS = {"bf16": _normalized("BFLOAT16", "NCHW"), "f32": _normalized("FLOAT32", "NHWC"),
        "f16": _normalized("FLOAT16", "NCHW"),
        "mixup": [{"preset": "imagenet_train"}, {"mixup": {"alpha": 0.4}}]}


class TransformServer(Server):
    """The dataset "train" alone, offering SETS."""

    def datasets(self):
        return self.train_dataset("".join(
            '  transform_sets {\n    name: "%s"\n    %s\n  }\n' % (
                name, sluice.transforms(ops).replace("\n", "\n    "))
            for name, ops in SETS.items()))


@pytest.fixture(scope="module")
def sets_server(sluice_bin, data_dir, tmp_path_factory):
    s = TransformServer(sluice_bin, tmp_path_factory.mktemp("transform-sets"), data_dir)
    yield s
    s.stop()


def _reference(images_u8, layout):
    """torchvision's Normalize after ToDtype(float32, scale=True) of uint8 NHWC images, in
    `layout`."""
    x = (images_u8.astype(np.float32) / 255 - np.float32(MEAN)) / np.float32(STD)
    return x.transpose(0, 3, 1, 2) if layout == "NCHW" else x


def test_describe_and_datasets_name_each_transform_sets_output(sets_server):
    with sluice.Client(sets_server.target) as c:
        info = c.dataset_info("train")
        assert [s.name for s in info.transform_sets] == ["default"] + list(SETS)
        for name, dtype, layout, mixes in (
                (None, "uint8", "NHWC", False), ("bf16", "bfloat16", "NCHW", False),
                ("f32", "float32", "NHWC", False), ("f16", "float16", "NCHW", False),
                ("mixup", "uint8", "NHWC", True)):
            plan = c.describe("train", transform_set=name, image_size=32)
            assert (plan.transform_set, plan.dtype, plan.layout, plan.mixes_labels) == (
                name or "default", dtype, layout, mixes)
            assert plan.image_shape == ((3, 32, 32) if layout == "NCHW" else (32, 32, 3))
        with pytest.raises(sluice.SluiceError) as e:
            c.describe("train", transform_set="bf17")
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "bf17" in e.value.message


@pytest.mark.parametrize("shared_memory", [False, True])
@pytest.mark.parametrize("name", ["bf16", "f32", "f16"])
def test_stream_of_a_float_set_is_the_default_recipe_normalized(sets_server, name,
                                                                 shared_memory):
    """The same seed's crops and flips: each float image is the uint8 one normalized (within
    the uint8 rounding the fused pass skips, and the dtype's own), over the socket and shared
    memory alike."""
    dtype, layout = {"bf16": ("bfloat16", "NCHW"), "f32": ("float32", "NHWC"),
                     "f16": ("float16", "NCHW")}[name]
    args = dict(batch_size=16, image_size=32, seed=11, epochs=1)
    with sluice.Client(sets_server.target) as c:
        plain = list(c.stream("train", shared_memory=False, **args))
        with c.stream("train", transform_set=name, shared_memory=shared_memory,
                      on_max_held="copy", **args) as stream:
            got = list(stream)
            # Through the segment when asked: its slots have room for float32 batches.
            assert (stream.shared_memory_batches == len(got)) == shared_memory
    assert len(got) == len(plain) > 1
    for p, b in zip(plain, got):
        assert b.dtype == dtype and b.layout == layout
        n = len(p.labels)  # 16, the epoch's last batch 8
        assert b.images.shape == ((n, 3, 32, 32) if layout == "NCHW" else (n, 32, 32, 3))
        assert b.labels.tolist() == p.labels.tolist() and b.position == p.position
        want = _reference(p.images, layout)
        got_f32 = _as_float32(b.images, dtype)
        # One uint8 step (1/255/std) plus the dtype's rounding (bfloat16 keeps 8 bits).
        relative = {"bfloat16": 2 ** -8, "float16": 2 ** -11, "float32": 2 ** -23}[dtype]
        tolerance = 1.01 / 255 / min(STD) + relative * np.abs(want)
        assert np.all(np.abs(got_f32 - want) <= tolerance)


def test_stream_of_a_mixup_set_carries_each_samples_pair_and_weight(sets_server):
    with sluice.Client(sets_server.target) as c:
        batches = list(c.stream("train", transform_set="mixup", batch_size=16, image_size=32,
                                seed=2, epochs=1))
    assert len(batches) > 1
    for b in batches:
        assert b.mixed_labels is not None and b.label_weights is not None
        # torchvision's MixUp: sample i mixed with sample i - 1, one lambda per batch.
        assert b.mixed_labels.tolist() == np.roll(b.labels, 1).tolist()
        assert np.all((b.label_weights >= 0) & (b.label_weights <= 1))
        assert np.all(b.label_weights == b.label_weights[0])
        soft = b.soft_labels(4)
        np.testing.assert_allclose(soft.sum(axis=1), 1, rtol=1e-6)


def test_torch_dataset_delivers_bf16_nchw_and_soft_labels(sets_server):
    torch = pytest.importorskip("torch")
    import sluice.torch
    args = dict(batch_size=16, image_size=32, seed=4)
    images, labels = next(iter(sluice.torch.SluiceDataset(sets_server.target, "train",
                                                          transform_set="bf16", **args)))
    assert images.dtype == torch.bfloat16 and tuple(images.shape) == (16, 3, 32, 32)
    assert labels.dtype == torch.int64
    # Through a DataLoader worker (its tensors handed over through torch's shared memory): the
    # same stream, the same bfloat16 tensors.
    loader = torch.utils.data.DataLoader(
        sluice.torch.SluiceDataset(sets_server.target, "train", transform_set="bf16", **args),
        batch_size=None, num_workers=1, multiprocessing_context="spawn")
    from_worker, worker_labels = next(iter(loader))
    assert from_worker.dtype == torch.bfloat16 and torch.equal(from_worker, images)
    assert torch.equal(worker_labels, labels)
    images, labels, mixed, weights = next(iter(sluice.torch.SluiceDataset(
        sets_server.target, "train", transform_set="mixup", **args)))
    assert images.dtype == torch.uint8 and mixed.dtype == torch.int64
    assert weights.dtype == torch.float32 and torch.equal(mixed, labels.roll(1))
    for soft_labels in (True, 4):
        images, soft = next(iter(sluice.torch.SluiceDataset(
            sets_server.target, "train", transform_set="mixup", soft_labels=soft_labels,
            **args)))
        assert soft.dtype == torch.float32 and tuple(soft.shape) == (16, 4)
        assert torch.allclose(soft.sum(dim=1), torch.ones(16))


def _train_torch(torch, sets_server, transform_set, steps):
    """Losses of a small CNN trained `steps` steps on the "train" set's batches: bf16 weights
    fed the bf16 NCHW batches as they come, float32 ones fed uint8 scaled as the uint8 test
    does."""
    import sluice.torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 4))
    if transform_set == "bf16":
        model = model.to(torch.bfloat16)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    ds = sluice.torch.SluiceDataset(sets_server.target, "train", batch_size=32, image_size=32,
                                    seed=5, epochs=0, transform_set=transform_set)
    losses = []
    for images, labels in torch.utils.data.DataLoader(ds, batch_size=None):
        if transform_set == "bf16":
            assert images.dtype == torch.bfloat16 and images.shape[1] == 3
            x = images  # no conversion: the model's own dtype and layout
        else:
            x = images.permute(0, 3, 1, 2).float() / 255
        loss = torch.nn.functional.cross_entropy(model(x).float(), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if len(losses) == steps:
            return losses


def test_torch_model_learns_from_bf16_nchw_normalized_batches_as_from_uint8(sets_server):
    torch = pytest.importorskip("torch")
    steps = 60
    runs = {name: _train_torch(torch, sets_server, name, steps) for name in (None, "bf16")}
    for name, losses in runs.items():
        assert len(losses) == steps and all(np.isfinite(losses)), name
        first, last = losses[0], np.mean(losses[-10:])
        # Four balanced classes start near ln 4 = 1.39; learning halves it at least.
        assert first > 1.0 and last < 0.5 * first, (name, first, last)
    # And about as well as from uint8 (the bf16 weights round their updates).
    assert np.mean(runs["bf16"][-10:]) < 1.5 * np.mean(runs[None][-10:]) + 0.1


def test_tf_dataset_asks_the_server_for_its_output_signature(sets_server):
    tf = pytest.importorskip("tensorflow")
    import sluice.tf
    args = dict(batch_size=16, image_size=32, seed=6)
    ds = sluice.tf.dataset(sets_server.target, "train", transform_set="bf16", **args)
    assert ds.element_spec == (tf.TensorSpec((None, 3, 32, 32), tf.bfloat16),
                               tf.TensorSpec((None,), tf.int32))
    images, labels = next(iter(ds))
    assert images.dtype == tf.bfloat16 and images.shape == (16, 3, 32, 32)
    mixed = sluice.tf.dataset(sets_server.target, "train", transform_set="mixup",
                              with_valid=True, **args)
    assert [s.dtype for s in mixed.element_spec] == [tf.uint8, tf.int32, tf.int32, tf.float32,
                                                     tf.bool]
    images, labels, mixed_labels, weights, valid = next(iter(mixed))
    assert mixed_labels.numpy().tolist() == np.roll(labels.numpy(), 1).tolist()
    soft = sluice.tf.dataset(sets_server.target, "train", transform_set="mixup",
                             soft_labels=True, **args)
    assert soft.element_spec[1] == tf.TensorSpec((None, 4), tf.float32)
    tf.keras.utils.set_random_seed(0)
    model = pooling_model(tf, tf.keras.losses.CategoricalCrossentropy)
    history = model.fit(soft, steps_per_epoch=3, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    with pytest.raises(sluice.SluiceError, match="bf17"):
        sluice.tf.dataset(sets_server.target, "train", transform_set="bf17", **args)


# --- review fixes: alignment, fan-in formats, transform sets old servers lack, lesser edges -----

@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_float_images_at_a_misaligned_offset_decode_to_an_aligned_read_only_copy(dtype):
    message, values = _message(dtype, "NCHW")
    itemsize = 4 if dtype == "float32" else 2
    # The message at each start within 64 aligned bytes: its images field then starts at every
    # remainder modulo the itemsize, as header lengths vary on the wire.
    store = np.zeros(len(message) + 128, dtype=np.uint8)
    base = -store.ctypes.data % 64
    misaligned = 0
    for shift in range(8):
        store[base + shift:base + shift + len(message)] = np.frombuffer(message, np.uint8)
        data = memoryview(store).toreadonly()[base + shift:base + shift + len(message)]
        images = sluice.decode_batch(data)[0].images
        assert images.ctypes.data % itemsize == 0
        assert not images.flags.writeable
        np.testing.assert_array_equal(_as_float32(images, dtype), values)
        if images.base is None or np.shares_memory(images, store):
            continue  # aligned as received: still a view
        misaligned += 1
        assert images.ctypes.data % 64 == 0
    assert misaligned == 8 - 8 // itemsize


def test_soft_labels_refuse_mixed_labels_without_weights_and_weights_without_labels():
    with pytest.raises(ValueError, match="both or neither, got only mixed_labels"):
        sluice.soft_labels([0, 1], [1, 0], None, 2)
    with pytest.raises(ValueError, match="both or neither, got only label_weights"):
        sluice.soft_labels([0, 1], None, [0.5, 0.5], 2)


def test_transforms_take_one_value_for_a_repeated_field_as_textproto_does():
    one = sluice.transforms([{"color_jitter": {"brightness": 0.4, "hue": 0.1}}])
    assert one == sluice.transforms([{"color_jitter": {"brightness": [0.4], "hue": [0.1]}}])
    op = config_pb2.TransformOp()
    from google.protobuf import text_format
    text_format.Parse(one.split("transforms {", 1)[1].rsplit("}", 1)[0], op)
    assert list(op.color_jitter.brightness) == [0.4]


def test_lockstep_padding_of_an_unknown_dtype_is_a_sluice_error():
    from sluice import _client
    share = _client._LockstepShare(service_pb2.StreamRequest(num_consumers=2))
    share.plan = service_pb2.StreamPlan(batch_size=2, image_height=4, image_width=4, dtype=9)
    with pytest.raises(sluice.SluiceError, match="dtype 9") as e:
        share.padding((0, 1))
    assert e.value.code == grpc.StatusCode.DATA_LOSS


def test_a_server_listing_no_transform_sets_predates_them_and_is_refused():
    from sluice._client import transform_set_problem
    old = service_pb2.DatasetInfo(name="train")  # as a server older than transform sets lists it
    for ok in (None, "", "default"):
        assert transform_set_problem(old, ok, "old:1") is None
    error = transform_set_problem(old, "bf16", "old:1")
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION and error.target == "old:1"
    assert "'bf16'" in error.message and "predates transform sets" in error.message
    new = service_pb2.DatasetInfo(name="train")
    new.transform_sets.add(name="default")
    new.transform_sets.add(name="bf16")
    assert transform_set_problem(new, "bf16", "new:1") is None
    error = transform_set_problem(new, "bf17", "new:1")
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "'bf17'" in error.message and "offers: default, bf16" in error.message


def test_stream_of_a_set_the_server_does_not_offer_is_refused_naming_set_and_server(sets_server):
    with sluice.Client(sets_server.target) as c:
        with pytest.raises(sluice.SluiceError) as e:
            c.stream("train", transform_set="bf17")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.target == sets_server.target
    assert "offers: default, bf16, f32, f16, mixup" in e.value.message


class _SetXServer(Server):
    """The dataset "train" whose set "x" is the default recipe in `output`'s dtype and layout."""

    def __init__(self, *args, output, **kwargs):
        self.output = output
        super().__init__(*args, **kwargs)

    def datasets(self):
        ops = [{"preset": "imagenet_train"}, {"output": self.output}]
        return self.train_dataset('  transform_sets {\n    name: "x"\n    %s\n  }\n'
                                  % sluice.transforms(ops).replace("\n", "\n    "))


@pytest.mark.parametrize("shared_memory", [False, True])
def test_fan_in_over_servers_whose_set_differs_in_dtype_is_refused_naming_both(
        sluice_bin, data_dir, tmp_path_factory, shared_memory):
    servers = [_SetXServer(sluice_bin, tmp_path_factory.mktemp("set-x"), data_dir, output=o)
               for o in ({"dtype": "BFLOAT16", "layout": "NCHW"},
                         {"dtype": "FLOAT32", "layout": "NHWC"})]
    try:
        with sluice.Client([s.target for s in servers]) as c:
            with pytest.raises(sluice.SluiceError) as e:
                with c.stream("train", transform_set="x", image_size=32, epochs=1,
                              shared_memory=shared_memory) as stream:
                    for _ in stream:
                        pass
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "bfloat16 NCHW" in e.value.message and "float32 NHWC" in e.value.message
        targets = {s.target for s in servers}
        assert e.value.target in targets  # the server that differs; the first one is named
        assert (targets - {e.value.target}).pop() in e.value.message
    finally:
        for s in servers:
            s.stop()


def test_tf_dataset_of_a_bf16_set_without_ml_dtypes_says_to_install_it(sets_server, monkeypatch):
    pytest.importorskip("tensorflow")
    import sluice.tf
    # As in a venv without ml_dtypes: bfloat16 images are their bits, as uint16.
    monkeypatch.setitem(_wire.DTYPES, 2, ("bfloat16", np.dtype("<u2")))
    with pytest.raises(sluice.SluiceError, match=r"pip install 'sluice\[bfloat16\]'") as e:
        sluice.tf.dataset(sets_server.target, "train", transform_set="bf16", batch_size=16,
                          image_size=32)
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
