"""tf.data adapter: ready batches from `sluice serve` as a tf.data.Dataset.

    ds = sluice.tf.dataset("127.0.0.1:50051", "train", batch_size=256, image_size=224)
    model.fit(ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255, y)), epochs=10)

Elements are (images, labels): uint8 [N, H, W, 3] (NHWC, RGB) and int32 [N], then the dataset's
features when it has any (a dict: name -> a dense tensor [N, *row_shape], a tf.RaggedTensor
[N, None, *row_shape] for a ragged one such as "boxes", tf.string for bytes), then the valid mask
(with_valid=True) and the record ids (record_ids=True). An unlabeled dataset's elements have no
labels: (images, features, ...). A transform set of the server's
(transform_set="bf16") gives its output as it is: tf.float16, tf.bfloat16 or tf.float32 images,
[N, 3, H, W] under NCHW; with mixup/cutmix, float32 [N, classes] soft labels (soft_labels=True)
or int32 mixed_labels and float32 label_weights after the labels. Each iteration of the dataset
opens its own stream and is the next epoch of the server's numbering (new file order, shuffle and
crops), so Keras fit(epochs=E) trains on E different epochs. The mask as a third element is what
Keras takes for sample weights, so padding samples count for nothing in losses and metrics:

    val = sluice.tf.dataset(target, "val", mode="eval", shard=(rank, ranks), with_valid=True)
    model.fit(train, epochs=10, validation_data=val.map(
        lambda x, y, valid: (x, y, tf.cast(valid, tf.float32))))

With fit(steps_per_epoch=S), Keras takes a new iterator (the next epoch) only after the
dataset's cardinality in steps, when it is known: a dataset whose count is exact declares it (a
sharded stream under equal shares, see dataset()), and fit(ds, epochs=E, steps_per_epoch=S)
with S that count trains each Keras epoch on the next epoch. Without a declared count Keras keeps
one iterator across its epochs and the plain dataset runs out after its first epoch ("Your
input ran out of data", and Keras epochs with fewer or no steps): pass ds.repeat(), whose every
repetition streams the next epoch, or epochs=0 (one endless stream):

    model.fit(ds.repeat(), epochs=E, steps_per_epoch=S)
"""
import threading

import grpc
import numpy as np
import tensorflow as tf

from sluice._client import Client, image_hw
from sluice import _wire
from sluice._errors import SluiceError

_TF_DTYPES = {"uint8": tf.uint8, "float16": tf.float16, "bfloat16": tf.bfloat16,
              "float32": tf.float32}


# service.proto FeatureType -> the tf dtype of a feature's values.
_TF_FEATURE_TYPES = {1: tf.int64, 2: tf.float32, 3: tf.string}


def feature_spec(info):
    """The spec of one feature (a sluice.v1.FeatureInfo) in an element: a tf.RaggedTensorSpec
    [N, None, *row_shape] (int64 row splits) for a ragged one, else a tf.TensorSpec [N,
    *row_shape]; bytes as tf.string."""
    dtype = _TF_FEATURE_TYPES[info.type]
    row_shape = tuple(info.row_shape)
    if info.ragged:
        return tf.RaggedTensorSpec(shape=(None, None) + row_shape, dtype=dtype, ragged_rank=1,
                                   row_splits_dtype=tf.int64)
    return tf.TensorSpec(shape=(None,) + row_shape, dtype=dtype)


def feature_tensors(features, infos):
    """Batch.features as the element's dict: tf.RaggedTensor.from_row_lengths for a ragged
    feature, a dense tensor otherwise (tf.string for bytes)."""
    out = {}
    for info in infos:
        value = features[info.name]
        dtype = _TF_FEATURE_TYPES[info.type]
        if info.ragged:
            if not isinstance(value, _wire.Ragged):  # a batch of 0 samples has no row_lengths
                value = _wire.Ragged(value, np.zeros(0, dtype=np.int64))
            values = tf.constant(value.values, dtype=dtype) if len(value.values) else tf.zeros(
                (0,) + tuple(info.row_shape), dtype=dtype)
            out[info.name] = tf.RaggedTensor.from_row_lengths(
                values, tf.constant(value.row_lengths, dtype=tf.int64), validate=False)
        elif len(value) == 0:
            out[info.name] = tf.zeros((0,) + tuple(info.row_shape), dtype=dtype)
        else:
            out[info.name] = tf.constant(value, dtype=dtype)
    return out


def output_signature(image_size, with_valid=False, record_ids=False, dtype="uint8",
                     layout="NHWC", mixes_labels=False, num_classes=None, features=(),
                     unlabeled=False):
    """The element spec of dataset(): N is unknown (a last partial batch is smaller).
    dtype, layout, mixes_labels, features ([sluice.v1.FeatureInfo]) and unlabeled: the stream's
    output (StreamPlan's); num_classes: soft labels of that many classes instead of class indexes
    (and mixed labels)."""
    height, width = image_hw(image_size)
    shape = (None, 3, height, width) if layout == "NCHW" else (None, height, width, 3)
    spec = (tf.TensorSpec(shape=shape, dtype=_TF_DTYPES[dtype]),)
    if unlabeled:
        pass
    elif num_classes:
        spec += (tf.TensorSpec(shape=(None, num_classes), dtype=tf.float32),)
    else:
        spec += (tf.TensorSpec(shape=(None,), dtype=tf.int32),)
        if mixes_labels:
            spec += (tf.TensorSpec(shape=(None,), dtype=tf.int32),
                     tf.TensorSpec(shape=(None,), dtype=tf.float32))
    if features:
        spec += ({f.name: feature_spec(f) for f in features},)
    if with_valid:
        spec += (tf.TensorSpec(shape=(None,), dtype=tf.bool),)
    if record_ids:
        spec += (tf.TensorSpec(shape=(None, 2), dtype=tf.int64),)
    return spec


def dataset(target, dataset, batch_size=None, image_size=None, mode=None, seed=None, epochs=1,
            shard=None, job_name=None, start_position=None, drop_remainder=None, prefetch=2,
            token=None, root_certificates=None, connect_timeout=10.0,
            allow_partial_fleet=False, equal_shares=None, record_ids=False, with_valid=False,
            shared_memory=None, max_held=4, consumer_index=None, num_consumers=None,
            transform_set=None, soft_labels=False):
    """A tf.data.Dataset of (images, labels) batches of `dataset` served at `target` (one server
    or several: see Client).

    batch_size, image_size (N or (height, width)): None for the dataset's defaults; the image
    size, which fixes the output signature, is then asked of the server (ListDatasets) here.
    epochs: epochs per iteration of the dataset (default 1: one per Keras epoch; 0: one endless
    iteration). Iteration i starts where iteration i-1 ended (at epoch 0, or at
    start_position's epoch, whose position the first iteration resumes), each exactly that
    epoch of one long stream; so do the repetitions of dataset(...).repeat(), which Keras
    fit(steps_per_epoch=S) needs without a declared cardinality (see the module's docstring).
    With job_name, iteration i is the run of the shared job that starts at its epoch
    (start_position (epoch, 0, 0), given only as an epoch's start), so every consumer's i-th
    iteration meets the others' in the same run; with num_consumers, consumer `consumer_index`
    of num_consumers in lockstep, each with the same number of batches (Client.stream()).
    equal_shares: None (the server's: "drop" in train, "pad" in eval), "drop", "pad" or "off":
    how the consumers of a sharded stream (`shard` count > 1) are kept equal (Client.stream()).
    transform_set: one of the dataset's transform sets (Client.stream()); the images' dtype and
    layout, and whether labels are mixed, are asked of the server (DescribeStream) here, for
    the output signature.
    soft_labels: True (the dataset's num_classes, from the server) or a number of classes:
    labels are float32 [N, classes] soft labels (one-hot without mixing; Keras's
    CategoricalCrossentropy takes them). False (default): int32 class indexes, and a transform
    set that mixes labels (mixup, cutmix) adds mixed_labels int32 [N] and label_weights float32
    [N] after them (sample i is label_weights[i] of labels[i] and the rest of
    mixed_labels[i]).
    with_valid: then bool [N], False for a padding sample (all True without padding; third
    after plain labels, as Keras takes sample weights); record_ids: then int64 [N, 2], (file,
    record) per sample.
    When every server's DescribeStream says the batch count is exact (a sharded stream, or a
    shared job's consumer in lockstep, under "drop" or "pad"), epochs > 0 and start_position is
    none or an epoch's start (epoch, 0, 0), the dataset's cardinality is that count
    (tf.data.experimental.assert_cardinality), so Keras knows its steps per epoch. With job_name
    any other start_position raises ValueError here.
    shared_memory, max_held: as Client.stream()'s: same-host shared memory from a server on
    this host by default (None) or with True; either way on_max_held is "copy" (each batch
    taken while max_held are held is copied out of its slot), as tf.data keeps batches it
    prefetches or buffers and releases them when it likes.
    Other arguments are Client.stream()'s and Client's; `prefetch` batches are read ahead by the
    client and as many again by tf.data.
    Errors (e.g. SluiceError NOT_FOUND for an unknown dataset) surface when the dataset is
    iterated, as tf.errors with the server's message (or here, when the image size or the
    number of classes is asked for, or a transform_set's output).
    """
    if soft_labels is not False and not (soft_labels is True or (
            isinstance(soft_labels, int) and soft_labels > 0)):
        raise ValueError("soft_labels must be False, True (the dataset's num_classes) or a "
                         "number of classes, got %r" % (soft_labels,))
    if epochs is None or epochs < 0:
        raise ValueError("epochs is the epochs per iteration, 0 (forever) or more; got %r"
                         % (epochs,))
    at_epoch_start = start_position is None or (
        not isinstance(start_position, dict) and tuple(start_position)[1:3] == (0, 0))
    if job_name and not at_epoch_start:
        raise ValueError("a shared job (job_name) starts only at an epoch's start, (epoch, 0, "
                         "0): it names the run of the job that starts there; got "
                         "start_position %r" % (start_position,))

    def client():
        return Client(target, token=token, root_certificates=root_certificates,
                      connect_timeout=connect_timeout)

    num_classes = soft_labels if soft_labels is not True else None
    if image_size is None or soft_labels is True:
        with client() as c:
            info = c.dataset_info(dataset)
        if image_size is None:
            image_size = (info.image_height, info.image_width or info.image_height)
        if soft_labels is True:
            num_classes = info.num_classes
            if num_classes < 1:
                raise ValueError("soft_labels=True, but the server does not say dataset %r's "
                                 "num_classes: pass soft_labels=<number of classes>" % dataset)
    height, width = image_hw(image_size)
    request = dict(batch_size=batch_size, image_size=(height, width), mode=mode, seed=seed,
                   shard=shard, job_name=job_name, drop_remainder=drop_remainder,
                   allow_partial_fleet=allow_partial_fleet, equal_shares=equal_shares,
                   record_ids=record_ids, consumer_index=consumer_index,
                   num_consumers=num_consumers, transform_set=transform_set)
    # The plan's output (dtype, layout, mixed labels) fixes the signature.
    try:
        with client() as c:
            plan = c.describe(dataset, **request)
    except SluiceError:
        if transform_set:
            raise  # its output is the set's: without the plan there is no signature
        plan = None  # a request the server refuses fails when iterated, with its message
    output = dict(dtype="uint8", layout="NHWC", mixes_labels=False, features=(), unlabeled=False)
    if plan is not None:
        if plan.dtype not in _TF_DTYPES or plan.layout not in ("NHWC", "NCHW"):
            raise SluiceError(grpc.StatusCode.FAILED_PRECONDITION,
                              "dataset %r: the server's batches are %s %s, which this client "
                              "does not know" % (dataset, plan.dtype, plan.layout))
        output = dict(dtype=plan.dtype, layout=plan.layout, mixes_labels=plan.mixes_labels,
                      features=tuple(plan.features), unlabeled=plan.unlabeled)
        if plan.unlabeled and num_classes:
            raise ValueError("soft_labels, but dataset %r is unlabeled" % dataset)
        if plan.dtype == "bfloat16" and _wire.DTYPES[2][1] == np.dtype("<u2"):
            # Without ml_dtypes the images are uint16 bits, which from_generator refuses as
            # tf.bfloat16 with a type error that names neither the cause nor the cure.
            raise SluiceError(grpc.StatusCode.FAILED_PRECONDITION,
                              "dataset %r: transform set %r gives bfloat16 images, which need "
                              "the ml_dtypes package: pip install 'sluice[bfloat16]'"
                              % (dataset, transform_set))
    cardinality = None
    if epochs and (num_consumers or not job_name) and at_epoch_start:
        if plan is not None and plan.equal_shares in ("drop", "pad") and (
                plan.num_consumers > 0 or all(p.shard.consumers > 1 for _, p in plan.plans)):
            # Equal shares among the request's consumers (a job's in lockstep, or the shards':
            # not a server's own --shard, which an unsharded fan-in reads whole): the count is
            # exact, else only an upper bound.
            cardinality = plan.batches_per_epoch * epochs
    lock = threading.Lock()
    state = {"next": start_position[0] if start_position is not None else 0,
             "resume": start_position}  # guarded by lock

    def claim():
        """The start epoch and position of a new iteration, which takes its epochs from
        there."""
        with lock:
            epoch = state["next"]
            state["next"] = epoch + max(epochs, 1)
            resume, state["resume"] = state["resume"], None
        if resume is not None and resume[0] == epoch:
            return epoch, resume
        # A shared job is always named by its run's start, epoch 0 too.
        return epoch, (epoch, 0, 0) if epoch > 0 or job_name else None

    def reached(epoch):
        with lock:
            state["next"] = max(state["next"], epoch + 1)

    def batches():
        epoch, start = claim()
        with client() as c:
            with c.stream(dataset, epochs=epoch + epochs if epochs else 0,
                          start_position=start, prefetch=prefetch, shared_memory=shared_memory,
                          max_held=max_held, on_max_held="copy", **request) as stream:
                for batch in stream:
                    reached(batch.position.epoch)
                    out = (batch.images,)
                    if output["unlabeled"]:
                        pass
                    elif num_classes:
                        out += (batch.soft_labels(num_classes),)
                    elif output["mixes_labels"]:
                        out += (batch.labels, batch.mixed_labels, batch.label_weights)
                    else:
                        out += (batch.labels,)
                    if output["features"]:
                        out += (feature_tensors(batch.features, output["features"]),)
                    if with_valid:
                        out += (batch.valid if batch.valid is not None
                                else np.ones(len(batch.images), dtype=np.bool_),)
                    if record_ids:
                        out += (batch.record_ids,)
                    yield out

    ds = tf.data.Dataset.from_generator(
        batches, output_signature=output_signature((height, width), with_valid, record_ids,
                                                   num_classes=num_classes, **output))
    if cardinality is not None:
        ds = ds.apply(tf.data.experimental.assert_cardinality(cardinality))
    return ds.prefetch(prefetch)
