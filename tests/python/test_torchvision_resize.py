"""Resize (formats/image_ops.h, ResizeOptions) against the references, through pixel_ops_probe's
"resize": bilinear and bicubic against torchvision's F.resize(uint8 tensor, antialias=True),
which filters in float and rounds once; area against Pillow's Image.resize(BOX) (torchvision's
tensor resize has no box filter). Within one level everywhere; the share of exact pixels is
printed (pytest -s) and held to a floor, so a drift shows before it breaks the bound."""
import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F
from PIL import Image
from torchvision.transforms import InterpolationMode

from torchvision_probe import photo_like, probe

BOX = getattr(Image, "Resampling", Image).BOX

# (source height, width), (output height, width): shrinking 2x and 3.7x, enlarging 1.5x, odd
# sizes, one axis shrunk while the other grows, one axis unchanged.
SIZES = {
    "shrink 2x": ((160, 224), (80, 112)),
    "shrink 3.7x": ((259, 370), (70, 100)),
    "enlarge 1.5x": ((100, 120), (150, 180)),
    "odd": ((97, 131), (45, 203)),
    "odd 2": ((131, 97), (57, 33)),
    "width only": ((61, 187), (61, 50)),
}

# The lowest share of exact pixels seen on these images, less a margin. Bilinear is the
# fixed-point fast path, rounded between its passes (72-100% exact); area rounds the exact box
# once where Pillow rounds twice (between its passes, and ties up), which at integer scales
# leaves many values a level apart (50-100%; test_area_at_2x_is_the_exact_block_mean_rounded). Bicubic is torchvision's arithmetic: it differs only where the
# exact value is a tie, k + 0.5, or within float32's error of one (test_bicubic_differs_only_at_
# ties), which symmetric patterns hit often: 97.5% on the hard edges enlarged 1.5x, 99.98% else.
EXACT_FLOOR = {"bilinear": 0.6, "area": 0.4, "bicubic": 0.95}


def reference(img, height, width, interpolation):
    if interpolation == "area":
        return np.asarray(Image.fromarray(img).resize((width, height), BOX))
    mode = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC}
    t = torch.from_numpy(img).permute(2, 0, 1).contiguous()
    out = F.resize(t, [height, width], interpolation=mode[interpolation], antialias=True)
    return out.permute(1, 2, 0).numpy()


def images(shape):
    h, w = shape
    rng = np.random.default_rng(h * 1000 + w)
    noise = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    # Hard black/white edges: bicubic rings past 0 and 255 there, and must clamp as torchvision.
    edges = ((np.arange(w)[None, :] // 5 + np.arange(h)[:, None] // 7) % 2 * 255).astype(np.uint8)
    return {"photo": photo_like(h, w, seed=1), "noise": noise,
            "edges": np.repeat(edges[:, :, None], 3, axis=2)}


def compare(got, want, label):
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    exact = float(np.mean(diff == 0))
    print(f"{label}: max |diff| {diff.max()}, exact {exact:.4f}")
    return int(diff.max()), exact


@pytest.mark.parametrize("interpolation", ["bilinear", "area", "bicubic"])
@pytest.mark.parametrize("case", list(SIZES))
def test_resize_is_within_one_level_of_the_reference(case, interpolation):
    src, (h, w) = SIZES[case]
    for name, img in images(src).items():
        got = probe(img, "resize", out_shape=(h, w, 3), width=w, height=h, filter=interpolation)
        worst, exact = compare(got, reference(img, h, w, interpolation),
                               f"{interpolation} {case} {name}")
        assert worst <= 1, f"{interpolation} {case} {name}: off by {worst}"
        assert exact >= EXACT_FLOOR[interpolation], f"{interpolation} {case} {name}: {exact}"


@pytest.mark.parametrize("case", list(SIZES))
def test_bicubic_differs_only_at_ties(case):
    # Where torchvision (float32) and Sluice disagree, the exact value (torch in float64) lies on,
    # or within float32 error of, a half: both round the same exact filter, and float noise picks
    # the side of a tie.
    src, (h, w) = SIZES[case]
    for name, img in images(src).items():
        got = probe(img, "resize", out_shape=(h, w, 3), width=w, height=h, filter="bicubic")
        differs = got != reference(img, h, w, "bicubic")
        t = torch.from_numpy(img).permute(2, 0, 1).double()[None]
        exact = torch.nn.functional.interpolate(t, size=[h, w], mode="bicubic",
                                                align_corners=False, antialias=True)
        exact = exact[0].permute(1, 2, 0).numpy()[differs]
        distance = np.abs(exact - np.floor(exact) - 0.5)
        print(f"bicubic {case} {name}: {differs.sum()} differ, worst {distance.max(initial=0):.2g}"
              " from a tie")
        assert distance.max(initial=0) < 2e-3, f"{case} {name}: {exact[distance.argmax()]}"


@pytest.mark.parametrize("interpolation", ["bilinear", "area", "bicubic"])
@pytest.mark.parametrize("hflip,vflip", [(1, 0), (0, 1), (1, 1)])
def test_mirrors_equal_resize_then_flip(interpolation, hflip, vflip):
    img = photo_like(131, 97, seed=2)
    h, w = 57, 40
    plain = probe(img, "resize", out_shape=(h, w, 3), width=w, height=h, filter=interpolation)
    got = probe(img, "resize", out_shape=(h, w, 3), width=w, height=h, filter=interpolation,
                hflip=hflip, vflip=vflip)
    want = plain
    if hflip:
        want = want[:, ::-1]
    if vflip:
        want = want[::-1]
    np.testing.assert_array_equal(got, want)
    # And so within a level of torchvision's flips of its resize.
    ref = torch.from_numpy(reference(img, h, w, interpolation).copy()).permute(2, 0, 1)
    if hflip:
        ref = F.hflip(ref)
    if vflip:
        ref = F.vflip(ref)
    worst, _ = compare(got, ref.permute(1, 2, 0).numpy(), f"{interpolation} flips {hflip}{vflip}")
    assert worst <= 1


def test_unknown_filter_is_refused_by_name():
    img = photo_like(8, 8)
    with pytest.raises(AssertionError, match="filter=lanczos"):
        probe(img, "resize", out_shape=(4, 4, 3), width=4, height=4, filter="lanczos")


def test_area_at_2x_is_the_exact_block_mean_rounded():
    # Where area and Pillow's BOX differ, Pillow is the one off: at 2x each output is the mean of
    # a 2x2 block, which Pillow rounds twice (between its passes, ties up), landing up to a whole
    # level away (about half the pixels); Sluice rounds the exact mean once, ties to even.
    img = photo_like(160, 224, seed=3)
    exact = img.astype(np.float64).reshape(80, 2, 112, 2, 3).mean(axis=(1, 3))
    got = probe(img, "resize", out_shape=(80, 112, 3), width=112, height=80, filter="area")
    np.testing.assert_array_equal(got, np.round(exact))
    pillow = reference(img, 80, 112, "area")
    print(f"Pillow BOX equals the rounded exact mean at {np.mean(pillow == np.round(exact)):.3f}")
