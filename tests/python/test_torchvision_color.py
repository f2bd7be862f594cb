"""The colour ops and the output writer (formats/pixel_ops.cc) against torchvision's functional ops
on the same uint8 pixels (torchvision 0.14's transforms.functional, whose tensor kernels v2 took
over): within 1 level per pixel for uint8 results, 1e-3 for float ones, and each op's fraction of
exactly equal values printed."""
import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F
from torchvision.transforms import functional_tensor as FT

from torchvision_probe import photo_like, probe


def _images():
    a = photo_like(61, 83, seed=1)  # odd sizes: the SIMD kernels' tails
    b = photo_like(224, 224, seed=2)
    b[:40] = b[:40, :, :1]  # gray rows: hue's max == min case
    b[40:50, :, 1] = b[40:50, :, 0]  # two equal channels
    c = np.full((17, 33, 3), 200, np.uint8)  # a constant image
    return [a, b, c]


IMAGES = _images()


@pytest.fixture(scope="module")
def report(request):
    lines = []
    yield lines.append
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print("\nexactly equal to torchvision, per op:")
        for line in lines:
            print("  " + line)


def _chw(img):
    return torch.from_numpy(img).permute(2, 0, 1).contiguous()


def _hwc(t):
    return t.permute(1, 2, 0).numpy()


def _compare_u8(report, name, ours, theirs, tolerance=1):
    ours = np.concatenate([o.ravel() for o in ours]).astype(np.int32)
    theirs = np.concatenate([t.ravel() for t in theirs]).astype(np.int32)
    diff = np.abs(ours - theirs)
    report(f"{name}: {np.mean(diff == 0):.4%} (max diff {diff.max()})")
    assert diff.max() <= tolerance, f"{name}: max diff {diff.max()}"


CASES = [
    ("brightness", {"factor": f}, lambda t, f=f: F.adjust_brightness(t, f))
    for f in (0.0, 0.6, 1.0, 1.37, 1.4)
] + [
    ("contrast", {"factor": f}, lambda t, f=f: F.adjust_contrast(t, f))
    for f in (0.0, 0.6, 1.0, 1.4, 2.5)
] + [
    ("saturation", {"factor": f}, lambda t, f=f: F.adjust_saturation(t, f))
    for f in (0.0, 0.6, 1.0, 1.4, 3.0)
] + [
    ("hue", {"factor": f}, lambda t, f=f: F.adjust_hue(t, f))
    for f in (-0.5, -0.23, -0.05, 0.0, 0.1, 0.37, 0.5)
] + [
    ("grayscale", {}, lambda t: F.rgb_to_grayscale(t, num_output_channels=3)),
] + [
    ("solarize", {"threshold": v}, lambda t, v=v: F.solarize(t, v))
    for v in (0, 1, 64.5, 128, 200, 255)
] + [
    ("posterize", {"bits": b}, lambda t, b=b: F.posterize(t, b)) for b in (1, 2, 4, 7, 8)
] + [
    ("gaussian_blur", {"kernel_size": k, "sigma": s},
     lambda t, k=k, s=s: F.gaussian_blur(t, [k, k], [s, s]))
    for k, s in ((1, 0.5), (3, 0.1), (3, 1.0), (5, 0.8), (9, 2.0), (23, 2.0), (23, 0.1))
]


@pytest.mark.parametrize("op,params,reference", CASES,
                         ids=[f"{op}-{'-'.join(map(str, p.values()))}" for op, p, _ in CASES])
def test_op_equals_torchvision_within_one_level(report, op, params, reference):
    ours, theirs = [], []
    for img in IMAGES:
        if op == "gaussian_blur" and params["kernel_size"] // 2 >= min(img.shape[:2]):
            continue  # torchvision refuses reflect padding that wide
        ours.append(probe(img, op, **params))
        theirs.append(_hwc(reference(_chw(img))))
    _compare_u8(report, f"{op} {params}", ours, theirs)


def _hue_v2(t, factor):
    """adjust_hue as transforms.v2 ends it: back to uint8 by convert_image_dtype (x * 255.999,
    truncated) rather than 0.14's x * 255 truncated; the same _rgb2hsv and _hsv2rgb."""
    hsv = FT._rgb2hsv(t.to(torch.float32) / 255.0)
    h, s, v = hsv.unbind(dim=-3)
    rgb = FT._hsv2rgb(torch.stack(((h + factor) % 1.0, s, v), dim=-3))
    return FT.convert_image_dtype(rgb, torch.uint8)


@pytest.mark.parametrize("factor", [-0.5, -0.23, 0.0, 0.1, 0.37, 0.5])
def test_hue_equals_v2_conversion_exactly(report, factor):
    ours = [probe(img, "hue", factor=factor) for img in IMAGES]
    theirs = [_hwc(_hue_v2(_chw(img), factor)) for img in IMAGES]
    _compare_u8(report, f"hue (v2's uint8 conversion) {factor}", ours, theirs, tolerance=0)


def test_hue_zero_is_identity():
    for img in IMAGES:
        np.testing.assert_array_equal(probe(img, "hue", factor=0.0), img)


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
OUTPUTS = [(d, l, n) for d in ("uint8", "float32", "float16", "bfloat16") for l in ("NHWC", "NCHW")
           for n in (False, True) if not (d == "uint8" and n)]


def _output(img, dtype, layout, normalize):
    params = {"dtype": dtype, "layout": layout}
    if normalize:
        params.update(mean=",".join(map(str, MEAN)), std=",".join(map(str, STD)))
    h, w, _ = img.shape
    shape = (h, w, 3) if layout == "NHWC" else (3, h, w)
    np_dtype = {"uint8": np.uint8, "float32": np.float32, "float16": np.float16,
                "bfloat16": np.uint16}[dtype]
    return probe(img, "output", out_dtype=np_dtype, out_shape=shape, **params)


def _reference_float(img, layout, normalize):
    t = _chw(img).to(torch.float32) / 255.0
    if normalize:
        t = F.normalize(t, MEAN, STD)
    return t if layout == "NCHW" else t.permute(1, 2, 0).contiguous()


@pytest.mark.parametrize("dtype,layout,normalize", OUTPUTS,
                         ids=[f"{d}-{l}-{'norm' if n else 'plain'}" for d, l, n in OUTPUTS])
def test_output_equals_torch(report, dtype, layout, normalize):
    equal = []  # per image: the fraction of values equal to torch's in this dtype
    for img in IMAGES:
        ours = _output(img, dtype, layout, normalize)
        if dtype == "uint8":
            want = img if layout == "NHWC" else _chw(img).numpy()
            np.testing.assert_array_equal(ours, want)
            equal.append(1.0)
            continue
        ref = _reference_float(img, layout, normalize)
        ours32 = _output(img, "float32", layout, normalize)
        # value = x * scale + bias with scale = 1 / (255 std): torch divides instead (an ulp apart).
        np.testing.assert_allclose(ours32, ref.numpy(), rtol=1e-3, atol=1e-3)
        if dtype == "float32":
            equal.append(np.mean(ours32 == ref.numpy()))
        elif dtype == "float16":
            # torch's own rounding of our float32 values, exactly; and near torch's values.
            np.testing.assert_array_equal(ours, torch.from_numpy(ours32).half().numpy())
            np.testing.assert_allclose(ours.astype(np.float32), ref.numpy(), rtol=1e-3,
                                       atol=1e-3)
            equal.append(np.mean(ours == ref.half().numpy()))
        else:
            bf16 = torch.from_numpy(ours.view(np.int16)).view(torch.bfloat16)
            assert torch.equal(bf16, torch.from_numpy(ours32).to(torch.bfloat16))
            theirs = ref.to(torch.bfloat16)
            # bfloat16 keeps 8 significant bits: within one unit of torch's rounding of its float32.
            torch.testing.assert_close(bf16.float(), theirs.float(), rtol=2 ** -7, atol=1e-3)
            equal.append((bf16 == theirs).float().mean().item())
    report(f"output {dtype} {layout} normalize={normalize}: "
           + ", ".join(f"{e:.4%}" for e in equal) + " (per image)")
