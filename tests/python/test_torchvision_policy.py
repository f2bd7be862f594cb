"""TrivialAugmentWide's and RandAugment's ops (formats/policy_ops.cc, pipeline/auto_augment.cc)
against torchvision 0.14's on the same pixels: its tensor kernels (F.autocontrast, F.equalize,
F.adjust_sharpness, F.affine), the policies' magnitude bins (_augmentation_space), and every op
of both spaces through _apply_op at several magnitudes of both signs, NEAREST, fill None."""
import math

import numpy as np
import pytest
import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F
from torchvision.transforms.autoaugment import RandAugment, TrivialAugmentWide, _apply_op

from torchvision_probe import photo_like, probe

# Sizes: both even, both odd, and of mixed parity (where a 90 degree turn puts every source
# coordinate on a .5 tie).
SIZES = [(48, 64), (29, 37), (33, 48)]
NUM_BINS = 31
# The affine ops' tolerance: nearest-neighbour picks one source pixel, so a grid coordinate that
# lands on a .5 tie can pick the neighbour if its float32 rounding differs from torch's by one ulp
# (we compute the grid in torch's order, so none is expected). Such a pixel may differ by any
# amount; count them instead.
AFFINE_MAX_DIFFERING = 0.005
GEOMETRIC = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}


def images():
    out = []
    for i, (h, w) in enumerate(SIZES):
        out.append(photo_like(h, w, seed=i))
    # Low contrast (autocontrast and equalize stretch it), one constant channel, and a constant
    # image (both leave it unchanged).
    low = (photo_like(40, 44, seed=7) // 4 + 90).astype(np.uint8)
    low[..., 2] = 77
    out.append(low)
    out.append(np.full((16, 20, 3), 133, np.uint8))
    return out


def to_tensor(img):
    return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).contiguous()


def to_hwc(t):
    return t.permute(1, 2, 0).contiguous().numpy()


def assert_within_one(ours, theirs, what):
    diff = np.abs(ours.astype(np.int16) - theirs.astype(np.int16))
    exact = float(np.mean(diff == 0))
    print(f"{what}: exact {exact:.4f}, max diff {diff.max()}")
    assert diff.max() <= 1, f"{what}: max abs diff {diff.max()} at {np.argwhere(diff > 1)[:5]}"


def assert_affine_close(ours, theirs, what):
    differing = float(np.mean(np.any(ours != theirs, axis=-1)))
    print(f"{what}: exact {1 - differing:.4f}")
    assert differing < AFFINE_MAX_DIFFERING, f"{what}: {differing:.2%} of pixels differ"


@pytest.mark.parametrize("index", range(len(images())))
def test_autocontrast_and_equalize_match_torchvision(index):
    img = images()[index]
    t = to_tensor(img)
    assert_within_one(probe(img, "autocontrast"), to_hwc(F.autocontrast(t)), f"autocontrast#{index}")
    assert_within_one(probe(img, "equalize"), to_hwc(F.equalize(t)), f"equalize#{index}")


@pytest.mark.parametrize("factor", [0.0, 0.01, 0.3, 1.0, 1.37, 1.99, 3.0])
def test_sharpness_matches_torchvision(factor):
    for index, img in enumerate(images()):
        ours = probe(img, "sharpness", factor=repr(factor))
        theirs = to_hwc(F.adjust_sharpness(to_tensor(img), factor))
        assert_within_one(ours, theirs, f"sharpness({factor})#{index}")


AFFINES = [
    # angle (counter-clockwise), tx, ty, shear_x, shear_y, center_origin
    (0, 0, 0, 0, 0, 0),
    (90, 0, 0, 0, 0, 0),
    (-90, 0, 0, 0, 0, 0),
    (180, 0, 0, 0, 0, 0),
    (33.5, 0, 0, 0, 0, 0),
    (-135, 0, 0, 0, 0, 0),
    (0, 7, -3, 0, 0, 0),
    (0, -32, 0, 0, 0, 0),
    (0, 0, 0, 30, 0, 1),
    (0, 0, 0, -44.7, 0, 1),
    (0, 0, 0, 0, 16.7, 1),
    (0, 0, 0, 0, -30, 1),
    (12, 3, 5, 10, -8, 0),
    (-47, -6, 2, -20, 15, 1),
]


@pytest.mark.parametrize("params", AFFINES)
def test_affine_nearest_matches_torchvision(params):
    angle, tx, ty, sx, sy, origin = params
    for index, img in enumerate(images()):
        ours = probe(img, "affine", angle=angle, tx=tx, ty=ty, shear_x=sx, shear_y=sy,
                     center_origin=origin)
        theirs = to_hwc(F.affine(to_tensor(img), angle=-angle, translate=[tx, ty], scale=1.0,
                                 shear=[sx, sy], interpolation=InterpolationMode.NEAREST,
                                 center=[0, 0] if origin else None))
        assert_affine_close(ours, theirs, f"affine{params}#{index}")


def torch_space(policy, num_bins, h, w):
    if policy == "trivial_augment_wide":
        return TrivialAugmentWide()._augmentation_space(num_bins)
    return RandAugment()._augmentation_space(num_bins, (h, w))


@pytest.mark.parametrize("policy", ["trivial_augment_wide", "rand_augment"])
@pytest.mark.parametrize("num_bins", [2, 5, 11, 17, 31, 32, 64, 100])
def test_magnitude_bins_match_augmentation_space(policy, num_bins):
    for h, w in [(224, 224), (29, 37), (331, 500)]:
        img = np.zeros((h, w, 3), np.uint8)
        table = probe(img, "auto_augment_magnitudes", out_dtype=np.float32,
                      out_shape=(-1, num_bins), policy=policy, num_bins=num_bins)
        space = torch_space(policy, num_bins, h, w)
        assert len(space) == table.shape[0]
        for row, (name, (magnitudes, _signed)) in zip(table, space.items()):
            if magnitudes.ndim == 0:
                assert np.all(np.isnan(row)), name
                continue
            theirs = magnitudes.to(torch.float32).numpy()
            # Bit for bit: Solarize's threshold and the translations' truncation turn on the
            # last bits of torch's float32 linspace.
            np.testing.assert_array_equal(row, theirs, err_msg=name)


def op_cases():
    """(policy, op name, signed magnitude) for every op of both spaces: bins 0, 1, the middle,
    RandAugment's default 9 and the last, each with both signs where the op is signed."""
    cases = []
    for policy in ["trivial_augment_wide", "rand_augment"]:
        # RandAugment's translations scale with the image; 64 wide and 48 high is SIZES[0].
        space = torch_space(policy, NUM_BINS, 48, 64)
        for name, (magnitudes, signed) in space.items():
            if magnitudes.ndim == 0:
                cases.append((policy, name, 0.0))
                continue
            for b in sorted({0, 1, NUM_BINS // 2, 9, NUM_BINS - 1}):
                m = float(magnitudes[b].item())
                cases.append((policy, name, m))
                if signed and m != 0:
                    cases.append((policy, name, -m))
    return cases


@pytest.mark.parametrize("policy,name,magnitude", op_cases())
def test_policy_op_matches_apply_op(policy, name, magnitude):
    for index, img in enumerate(images()):
        ours = probe(img, "auto_augment_op", name=name, magnitude=repr(magnitude))
        theirs = to_hwc(_apply_op(to_tensor(img), name, magnitude,
                                  interpolation=InterpolationMode.NEAREST, fill=None))
        what = f"{policy} {name}({magnitude})#{index}"
        if name in GEOMETRIC:
            assert_affine_close(ours, theirs, what)
        else:
            assert_within_one(ours, theirs, what)


def test_shear_magnitude_is_a_tangent():
    # _apply_op shears by atan(magnitude) degrees: a 0.99 shear is 44.7 degrees, not 0.99.
    img = images()[0]
    ours = probe(img, "auto_augment_op", name="ShearX", magnitude="0.99")
    theirs = probe(img, "affine", angle=0, tx=0, ty=0, shear_x=math.degrees(math.atan(0.99)),
                   shear_y=0, center_origin=1)
    assert np.array_equal(ours, theirs)


def run_policy(img, policy, num_ops, magnitude, stream):
    """Sluice's policy on img: the image and the (op name, magnitude) it drew."""
    h, w, _ = img.shape
    raw = probe(img, "auto_augment", out_shape=(-1,), policy=policy, num_ops=num_ops,
                magnitude=magnitude, num_bins=NUM_BINS, seed=1234, stream=stream)
    pixels, tail = raw[: h * w * 3].reshape(h, w, 3), raw[h * w * 3:]
    names = list(torch_space(policy, NUM_BINS, h, w).keys())
    ops = [(names[tail[i]], float(tail[i + 1: i + 9].view("<f8")[0]))
           for i in range(0, len(tail), 9)]
    return pixels, ops


@pytest.mark.parametrize("policy,num_ops,magnitude", [
    ("trivial_augment_wide", 1, 0),
    ("rand_augment", 2, 9),
    ("rand_augment", 3, 30),
])
def test_policy_draws_replayed_through_torchvision_match(policy, num_ops, magnitude):
    """The whole policy: Sluice's draws, replayed op by op through _apply_op, give the same
    image. Each colour op may round one level apart and a later op carries that along, so a pixel
    may differ by up to one per op; a geometric op after it may also pick its neighbour on a .5
    tie, so larger differences are counted like the affine ops'."""
    img = images()[0]
    seen = set()
    for stream in range(40):
        ours, ops = run_policy(img, policy, num_ops, magnitude, stream)
        assert len(ops) == num_ops
        theirs = to_tensor(img)
        for name, m in ops:
            seen.add(name)
            bins = torch_space(policy, NUM_BINS, *img.shape[:2])[name][0]
            if bins.ndim:
                assert any(abs(m) == float(b) for b in bins), (name, m)
            theirs = _apply_op(theirs, name, m, interpolation=InterpolationMode.NEAREST,
                               fill=None)
        theirs = to_hwc(theirs)
        diff = np.abs(ours.astype(np.int16) - theirs.astype(np.int16)).max(axis=-1)
        far = float(np.mean(diff > num_ops))
        print(f"{policy} {ops}: exact {float(np.mean(diff == 0)):.4f}")
        assert far < AFFINE_MAX_DIFFERING, f"{ops}: {far:.2%} of pixels differ by > {num_ops}"
    assert len(seen) >= 10, seen
