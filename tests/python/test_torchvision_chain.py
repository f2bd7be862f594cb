"""Whole transform lists, as the pipeline runs them (pixel_ops_probe's "chain": CompileTransforms,
PlanGeometry, RenderGeometry, ApplyPixelOps, WriteOutput), against torchvision given the same
parameters: the plan's crop window and flips, and each draw of the per-pixel ops, read from the
probe's JSON and replayed through torchvision.transforms.functional on uint8 tensors.

Each geometric op alone is one resampling, or none, as torchvision's: within one level for the
resampling filters, byte-exact for crops, padding and flips. A resize followed by a crop is, by
design, ONE resampling from a window rounded to whole source pixels (pipeline/geometry_plan.h,
"fused resampling"), not torchvision's two: test_resize_then_center_crop_is_one_fused_resampling
measures that difference and holds it to a loose bound."""
import json
import os
import subprocess
import tempfile
import urllib.parse

import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional_tensor as FT
from torchvision.transforms.autoaugment import _apply_op

from torchvision_probe import photo_like

BOX = getattr(Image, "Resampling", Image).BOX
MODES = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC}
PROTO_FILTER = {"bilinear": "INTERPOLATION_BILINEAR", "area": "INTERPOLATION_AREA",
                "bicubic": "INTERPOLATION_BICUBIC"}
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
# Share of pixels a policy's nearest-neighbour affine op may place one pixel apart from
# torchvision's (a sample point on a .5 tie; test_torchvision_policy.py has the same bound).
AFFINE_MAX_DIFFERING = 0.02

IMAGES = {"landscape": photo_like(97, 131, seed=3), "portrait": photo_like(150, 90, seed=4)}


def run_chain(img, transforms, out_h, out_w, seed=0, stream=0, dtype=np.uint8, nchw=False,
              via_file=False):
    """The chain's output (HxWx3, or 3xHxW with nchw) and its plan and draws."""
    exe = os.environ["PIXEL_OPS_PROBE"]
    h, w, _ = img.shape
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.rgb"), os.path.join(d, "out.bin")
        np.ascontiguousarray(img, dtype=np.uint8).tofile(src)
        if via_file:
            with open(os.path.join(d, "list.txtpb"), "w") as f:
                f.write(transforms)
            listing = "list_file=" + os.path.join(d, "list.txtpb")
        else:
            listing = "list=" + urllib.parse.quote(transforms, safe="")
        args = [exe, src, str(w), str(h), dst, "chain", listing, f"out_width={out_w}",
                f"out_height={out_h}", f"seed={seed}", f"stream={stream}"]
        run = subprocess.run(args, capture_output=True, text=True)
        assert run.returncode == 0, f"{' '.join(args)}: {run.stderr}"
        raw = np.fromfile(dst, dtype=np.uint16 if dtype == "bfloat16" else dtype)
        with open(dst + ".json") as f:
            plan = json.load(f)
    if dtype == "bfloat16":
        raw = (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.reshape((3, out_h, out_w) if nchw else (out_h, out_w, 3)), plan


def chw(img):
    return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).contiguous()


def hwc(t):
    return t.permute(1, 2, 0).contiguous().numpy()


def resized_crop(img, top, left, height, width, size, filter_name):
    """torchvision's RandomResizedCrop replay; area (no tensor box filter in torchvision) is
    Pillow's BOX, as test_torchvision_resize.py compares it."""
    if filter_name == "area":
        crop = img[top:top + height, left:left + width]
        return np.asarray(Image.fromarray(crop).resize((size[1], size[0]), BOX))
    return hwc(F.resized_crop(chw(img), top, left, height, width, list(size),
                              interpolation=MODES[filter_name], antialias=True))


def max_diff(ours, theirs):
    return int(np.abs(ours.astype(np.int16) - theirs.astype(np.int16)).max())


def geometry_replay(img, plan, size):
    """The plan's window resampled to size with its filter and flips, as torchvision would."""
    s = plan["source"]
    t = chw(resized_crop(img, s["y"], s["x"], s["height"], s["width"], size, plan["filter"]))
    if plan["flip_horizontal"]:
        t = F.hflip(t)
    if plan["flip_vertical"]:
        t = F.vflip(t)
    return t


def hue_v2(t, factor):
    """adjust_hue as transforms.v2 ends it (test_torchvision_color.py pins Sluice's hue to it
    exactly): back to uint8 by convert_image_dtype (x * 255.999, truncated) where 0.14's
    F.adjust_hue truncates x * 255, one level lower at times."""
    hsv = FT._rgb2hsv(t.to(torch.float32) / 255.0)
    h, s, v = hsv.unbind(dim=-3)
    rgb = FT._hsv2rgb(torch.stack(((h + factor) % 1.0, s, v), dim=-3))
    return FT.convert_image_dtype(rgb, torch.uint8)


def replay_draw(t, draw):
    name, p = draw["name"], draw["params"]
    if name == "brightness":
        return F.adjust_brightness(t, p[0])
    if name == "contrast":
        return F.adjust_contrast(t, p[0])
    if name == "saturation":
        return F.adjust_saturation(t, p[0])
    if name == "hue":
        return hue_v2(t, p[0])
    if name == "grayscale":
        return F.rgb_to_grayscale(t, num_output_channels=3)
    if name == "gaussian_blur":
        k = int(p[0])
        return F.gaussian_blur(t, [k, k], [p[1], p[1]])
    if name == "solarize":
        return F.solarize(t, p[0])
    if name == "posterize":
        return F.posterize(t, int(p[0]))
    if name == "rotate":
        return F.rotate(t, p[0], interpolation=InterpolationMode.NEAREST, fill=None)
    # A policy op: torchvision's name and signed magnitude, as _apply_op takes them (fill None:
    # zeros).
    return _apply_op(t, name, p[0], interpolation=InterpolationMode.NEAREST, fill=None)


# ---- Each geometric op alone ----

RRC_PARAMS = [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.5, 0.6), (1.0, 1.0)), ((0.2, 1.0), (0.3, 3.0)),
              ((1.0, 1.0), (3 / 4, 4 / 3))]


def is_rrc_window(window, img_h, img_w, scale, ratio):
    """Whether torchvision's RandomResizedCrop.get_params could draw window: a try (width
    round(sqrt(area * r)), height round(sqrt(area / r)) for an area in scale and a ratio in
    ratio, both inside the image) or the fallback, the centre crop clamped to ratio."""
    x, y, w, h = window["x"], window["y"], window["width"], window["height"]
    if not (0 <= x <= img_w - w and 0 <= y <= img_h - h):
        return False
    area = img_h * img_w
    a_lo, a_hi = (w - 0.5) * (h - 0.5), (w + 0.5) * (h + 0.5)
    r_lo, r_hi = (w - 0.5) / (h + 0.5), (w + 0.5) / (h - 0.5)
    if a_lo <= scale[1] * area and a_hi >= scale[0] * area and r_lo <= ratio[1] and \
            r_hi >= ratio[0]:
        return True
    in_ratio = img_w / img_h
    if in_ratio < ratio[0]:
        fw, fh = img_w, int(round(img_w / ratio[0]))
    elif in_ratio > ratio[1]:
        fw, fh = int(round(img_h * ratio[1])), img_h
    else:
        fw, fh = img_w, img_h
    return (x, y, w, h) == ((img_w - fw) // 2, (img_h - fh) // 2, fw, fh)


@pytest.mark.parametrize("filter_name", ["bilinear", "area", "bicubic"])
@pytest.mark.parametrize("scale,ratio", RRC_PARAMS)
def test_random_resized_crop_is_resized_crop_of_its_window(filter_name, scale, ratio):
    size = (56, 48)
    ops = (f"transforms {{ random_resized_crop {{ scale: {list(scale)} ratio: {list(ratio)} "
           f"size: {list(size)} interpolation: {PROTO_FILTER[filter_name]} }} }}")
    windows = set()
    for name, img in IMAGES.items():
        for stream in range(8):
            ours, plan = run_chain(img, ops, *size, seed=5, stream=stream)
            s, dst = plan["source"], plan["dest"]
            assert dst == {"x": 0, "y": 0, "width": size[1], "height": size[0]}, plan
            assert not plan["flip_horizontal"] and not plan["flip_vertical"]
            assert plan["filter"] == filter_name
            assert is_rrc_window(s, *img.shape[:2], scale, ratio), (name, plan)
            windows.add((s["x"], s["y"], s["width"], s["height"]))
            theirs = resized_crop(img, s["y"], s["x"], s["height"], s["width"], size, filter_name)
            assert max_diff(ours, theirs) <= 1, (name, stream, plan)
    if scale != (1.0, 1.0):
        assert len(windows) > 8, windows  # the window is drawn per image


@pytest.mark.parametrize("filter_name", ["bilinear", "area", "bicubic"])
@pytest.mark.parametrize("size", [(40, 50), (150, 200), (97, 20)])
def test_resize_to_size_is_torchvision_resize(filter_name, size):
    img = IMAGES["landscape"]
    ops = (f"transforms {{ resize {{ size: {list(size)} interpolation: {PROTO_FILTER[filter_name]}"
           f" }} }}")
    ours, plan = run_chain(img, ops, *size)
    assert plan["source"] == {"x": 0, "y": 0, "width": 131, "height": 97}
    assert max_diff(ours, resized_crop(img, 0, 0, 97, 131, size, filter_name)) <= 1


@pytest.mark.parametrize("shape,shorter,out", [((64, 64), 40, (40, 40)),
                                               ((60, 120), 25, (25, 50)),
                                               ((131, 97), 50, (67, 50))])
def test_resize_shorter_side_is_torchvision_resize(shape, shorter, out):
    # A list must end at a size known without the image, so a center_crop of exactly the resized
    # size follows: it keeps every pixel, and the op is one resampling (torchvision: the longer
    # side int(shorter * long / short)).
    img = photo_like(*shape, seed=6)
    ops = (f"transforms {{ resize {{ shorter_side: {shorter} }} }} "
           f"transforms {{ center_crop {{ size: {list(out)} }} }}")
    ours, _ = run_chain(img, ops, *out)
    theirs = hwc(F.resize(chw(img), shorter, interpolation=InterpolationMode.BILINEAR,
                          antialias=True))
    assert theirs.shape == ours.shape
    assert max_diff(ours, theirs) <= 1


@pytest.mark.parametrize("size", [(50, 60), (97, 131), (96, 130), (120, 160), (120, 100),
                                  (60, 140), (1, 1)])
def test_center_crop_is_torchvision_center_crop_exactly(size):
    """Smaller, equal, larger (zero padding, odd and even margins) and larger on one axis only."""
    for name, img in IMAGES.items():
        ours, _ = run_chain(img, f"transforms {{ center_crop {{ size: {list(size)} }} }}", *size)
        theirs = hwc(F.center_crop(chw(img), list(size)))
        np.testing.assert_array_equal(ours, theirs, err_msg=f"{name} {size}")


@pytest.mark.parametrize("size,padding", [((64, 64), 4), ((97, 131), 8), ((103, 137), 3),
                                          ((40, 30), 0), ((40, 40), 60)])
def test_random_crop_is_pad_then_crop_exactly(size, padding):
    """Including windows partly or wholly in the padding (padding 60 around 97x131)."""
    img = IMAGES["landscape"]
    ops = f"transforms {{ random_crop {{ size: {list(size)} padding: {padding} }} }}"
    offsets = set()
    for stream in range(24):
        ours, plan = run_chain(img, ops, *size, seed=2, stream=stream)
        if plan["dest"]["width"] == 0:
            assert not ours.any(), plan  # all padding
            continue
        # The crop's offset in the padded image: where the source lands in the output.
        top = plan["source"]["y"] - plan["dest"]["y"] + padding
        left = plan["source"]["x"] - plan["dest"]["x"] + padding
        assert 0 <= top <= 97 + 2 * padding - size[0], plan
        assert 0 <= left <= 131 + 2 * padding - size[1], plan
        offsets.add((top, left))
        theirs = hwc(F.crop(F.pad(chw(img), [padding]), top, left, *size))
        np.testing.assert_array_equal(ours, theirs, err_msg=str(plan))
    assert len(offsets) > 1 or size == (97 + 2 * padding, 131 + 2 * padding)


@pytest.mark.parametrize("h,v", [(1, 0), (0, 1), (1, 1), (0, 0)])
def test_flip_with_p_one_is_torchvision_flip_exactly(h, v):
    img = IMAGES["portrait"]
    # A list must end at a size known without the image: a center_crop of the image's own size
    # (a copy) fixes it.
    ours, plan = run_chain(img, "transforms { center_crop { size: [150, 90] } } "
                           f"transforms {{ flip {{ horizontal_p: {h} vertical_p: {v} }} }}",
                           150, 90)
    assert plan["flip_horizontal"] == bool(h) and plan["flip_vertical"] == bool(v)
    t = chw(img)
    if h:
        t = F.hflip(t)
    if v:
        t = F.vflip(t)
    np.testing.assert_array_equal(ours, hwc(t))


def test_flips_around_padding_crops_compose_as_in_torchvision():
    """A flip before or after a crop that pads: the padding (uneven for odd margins) must land on
    the side torchvision puts it. Random crops are matched against every offset torchvision could
    draw: exactly one must give the same bytes."""
    img = IMAGES["landscape"]
    t = chw(img)
    cases = [
        ("transforms { center_crop { size: [100, 140] } } transforms { flip { horizontal_p: 1 "
         "vertical_p: 1 } }", (100, 140), lambda x: F.vflip(F.hflip(F.center_crop(x, [100, 140])))),
        ("transforms { flip { horizontal_p: 1 vertical_p: 1 } } transforms { center_crop { size: "
         "[100, 140] } }", (100, 140), lambda x: F.center_crop(F.vflip(F.hflip(x)), [100, 140])),
        ("transforms { flip { horizontal_p: 1 } } transforms { center_crop { size: [60, 133] } } "
         "transforms { flip { vertical_p: 1 horizontal_p: 0 } }", (60, 133),
         lambda x: F.vflip(F.center_crop(F.hflip(x), [60, 133]))),
    ]
    for ops, size, reference in cases:
        ours, _ = run_chain(img, ops, *size)
        np.testing.assert_array_equal(ours, hwc(reference(t)), err_msg=ops)
    pad = 5
    for flip_first in (True, False):
        flip = "transforms { flip { horizontal_p: 1 vertical_p: 1 } } "
        crop = "transforms { random_crop { size: [90, 120] padding: 5 } } "
        ops = flip + crop if flip_first else crop + flip
        for stream in range(4):
            ours, plan = run_chain(img, ops, 90, 120, seed=9, stream=stream)
            base = F.vflip(F.hflip(t)) if flip_first else t
            padded = F.pad(base, [pad])
            matches = []
            for top in range(97 + 2 * pad - 90 + 1):
                for left in range(131 + 2 * pad - 120 + 1):
                    theirs = F.crop(padded, top, left, 90, 120)
                    if not flip_first:
                        theirs = F.vflip(F.hflip(theirs))
                    if np.array_equal(ours, hwc(theirs)):
                        matches.append((top, left))
            assert len(matches) == 1, (ops, stream, plan, matches)


def test_a_crop_padded_past_an_earlier_crop_shows_padding_not_the_pixels_it_cut_off():
    """center_crop, then a random_crop whose padding reaches past it: torchvision pads the
    center crop with zeros, so the source pixels the center crop cut off must not come back.
    Matched against every offset torchvision could draw: exactly one must give the same bytes."""
    img = IMAGES["landscape"]
    base = F.center_crop(chw(img), [60, 80])
    pad = 20
    padded = F.pad(base, [pad])
    ops = ("transforms { center_crop { size: [60, 80] } } "
           f"transforms {{ random_crop {{ size: [60, 80] padding: {pad} }} }}")
    for stream in range(6):
        ours, plan = run_chain(img, ops, 60, 80, seed=4, stream=stream)
        matches = [(top, left) for top in range(2 * pad + 1) for left in range(2 * pad + 1)
                   if np.array_equal(ours, hwc(F.crop(padded, top, left, 60, 80)))]
        assert len(matches) == 1, (stream, plan, matches)


def test_resize_then_center_crop_is_one_fused_resampling(capsys):
    """The intended difference: Sluice resamples once, from the crop's window rounded to whole
    source pixels, where torchvision resizes the whole image and then crops. The window's edge
    moves by up to half a source pixel, so the content shifts by a fraction of an output pixel
    and the scale of the two axes may differ by a pixel's worth: large local differences on the
    noise and hard edges of these images, small on average. Measured (printed) and held to a
    loose bound: mean under 3 levels, max under 96 (measured: mean 1.1-2.5, max 19-41)."""
    size = (224, 224)
    ops = ("transforms { resize { shorter_side: 256 } } "
           "transforms { center_crop { size: [224, 224] } }")
    means, maxes = [], []
    for shape in [(375, 500), (333, 500), (500, 353), (300, 301)]:
        img = photo_like(*shape, seed=shape[0])
        ours, plan = run_chain(img, ops, *size)
        theirs = hwc(F.center_crop(F.resize(chw(img), 256, antialias=True), list(size)))
        diff = np.abs(ours.astype(np.int16) - theirs.astype(np.int16))
        means.append(float(diff.mean()))
        maxes.append(int(diff.max()))
        with capsys.disabled():
            print(f"\nfused resize 256 + center_crop 224 of {shape}: source {plan['source']}, "
                  f"max |diff| {diff.max()}, mean {diff.mean():.3f}, "
                  f"share within 1 level {float(np.mean(diff <= 1)):.4f}")
    assert max(means) < 3 and max(maxes) < 96, (means, maxes)


def test_padding_crop_then_resize_has_hard_borders(capsys):
    """The same fusion around padding: a crop larger than the image, then a resize, renders the
    image into a whole-pixel rectangle of the output with zeros around it, where torchvision's
    resize blends the border pixels with the padding. The image's edges land within one output
    pixel of torchvision's; the mean difference is reported and loosely bounded."""
    img = IMAGES["landscape"]
    for crop, size in [((120, 160), (60, 80)), ((121, 161), (50, 70)), ((100, 300), (50, 100))]:
        ops = (f"transforms {{ center_crop {{ size: {list(crop)} }} }} "
               f"transforms {{ resize {{ size: {list(size)} }} }}")
        ours, plan = run_chain(img, ops, *size)
        theirs = hwc(F.resize(F.center_crop(chw(img), list(crop)), list(size), antialias=True))
        content = [np.flatnonzero(np.any(x != 0, axis=(1, 2))) for x in (ours, theirs)]
        assert abs(content[0][0] - content[1][0]) <= 1 and abs(content[0][-1] - content[1][-1]) <= 1
        content = [np.flatnonzero(np.any(x != 0, axis=(0, 2))) for x in (ours, theirs)]
        assert abs(content[0][0] - content[1][0]) <= 1 and abs(content[0][-1] - content[1][-1]) <= 1
        diff = np.abs(ours.astype(np.int16) - theirs.astype(np.int16))
        with capsys.disabled():
            print(f"\nfused center_crop {crop} + resize {size}: dest {plan['dest']}, "
                  f"max |diff| {diff.max()}, mean {diff.mean():.3f}")
        assert diff.mean() < 8, plan


# ---- Whole chains ----

COLOR_CHAIN = ("transforms { preset: PRESET_IMAGENET_TRAIN } "
               "transforms { color_jitter { brightness: 0.4 contrast: 0.4 saturation: 0.4 "
               "hue: 0.1 } } "
               "transforms { grayscale { p: 0.5 } } "
               "transforms { solarize { threshold: 192 p: 0.5 } } "
               "transforms { posterize { bits: 5 p: 0.5 } } "
               "transforms { gaussian_blur { kernel_size: 5 sigma: [0.1, 2.0] p: 0.5 } } ")
GEOMETRY = "transforms { preset: PRESET_IMAGENET_TRAIN } "
NORMALIZE = f"transforms {{ normalize {{ mean: {list(MEAN)} std: {list(STD)} }} }} "


def replay_chain(img, plan, size, geometry=None):
    """torchvision's chain: the plan's geometry (or the given geometric stage), then each draw."""
    t = geometry_replay(img, plan, size) if geometry is None else chw(geometry)
    for draw in plan["draws"]:
        t = replay_draw(t, draw)
    return t


def geometric_stage(img, geometry_ops, plan, size, seed, stream):
    """Sluice's image after the geometric ops of a chain: the chain cut after them, with the same
    generator (the geometry draws first, so its plan must be the whole chain's)."""
    stage, stage_plan = run_chain(img, geometry_ops, *size, seed=seed, stream=stream)
    for key in ("source", "dest", "flip_horizontal", "flip_vertical", "filter"):
        assert stage_plan[key] == plan[key], (key, stage_plan, plan)
    return stage


def spread(ours, theirs):
    diff = np.abs(ours.astype(np.int16) - theirs.astype(np.int16))
    return int(diff.max()), float(np.mean(diff > 1))


def test_color_chain_uint8_matches_torchvision_replay(capsys):
    """RandomResizedCrop + flip, ColorJitter in a random order, RandomGrayscale, RandomSolarize,
    RandomPosterize, GaussianBlur, for many seeds. In two parts:
    - the geometry is torchvision's resized_crop (+ hflip) of the plan's window within one level
      (Sluice's bilinear is fixed-point), and the per-pixel ops replayed through torchvision from
      Sluice's geometric stage give the SAME bytes (every draw applied as reported, in order);
    - the whole chain replayed in torchvision, geometry included, is printed (pytest -s): the
      one-level resampling differences are amplified by the later ops (contrast, brightness and
      saturation factors up to 1.4 each; posterize turns a level into up to 2^(8 - bits) levels;
      solarize flips a pixel at its threshold), so it is held to a share, not to one level."""
    size = (64, 48)
    seen = set()
    worst = (0, 0.0)
    for name, img in IMAGES.items():
        for stream in range(24):
            ours, plan = run_chain(img, COLOR_CHAIN, *size, seed=11, stream=stream,
                                   via_file=stream == 0)
            seen.update(d["name"] for d in plan["draws"])
            seen.add("hflip" if plan["flip_horizontal"] else "no flip")
            stage = geometric_stage(img, GEOMETRY, plan, size, 11, stream)
            assert max_diff(stage, hwc(geometry_replay(img, plan, size))) <= 1, plan
            np.testing.assert_array_equal(ours, hwc(replay_chain(img, plan, size, stage)),
                                          err_msg=f"{name} {stream} {plan}")
            far = spread(ours, hwc(replay_chain(img, plan, size)))
            worst = max(worst, far, key=lambda m: m[1])
            assert far[1] < 0.2, (name, stream, plan, far)
    with capsys.disabled():
        print(f"\ncolor chain replayed whole in torchvision: worst share of pixels > 1 level "
              f"{worst[1]:.4f} (max |diff| {worst[0]})")
    assert {"brightness", "contrast", "saturation", "hue", "grayscale", "solarize", "posterize",
            "gaussian_blur", "hflip", "no flip"} <= seen, seen


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_color_chain_normalized_nchw_matches_torchvision_replay(dtype):
    """The same chain, normalized and written as float32 or bfloat16 NCHW, against torchvision's
    replay from Sluice's geometric stage converted by ToDtype(float32, scale=True) and Normalize:
    within 1e-3 relative plus an absolute 1e-3 of a level (1 / (255 * std)), the arithmetic
    difference of x * scale + bias and (x / 255 - mean) / std; bfloat16 within its rounding
    (2^-8 relative) of that. The whole-torchvision replay is bounded to one level plus that for
    all but the share of pixels the uint8 test allows."""
    size = (64, 48)
    proto = {"float32": "DTYPE_FLOAT32", "bfloat16": "DTYPE_BFLOAT16"}[dtype]
    ops = (COLOR_CHAIN + NORMALIZE +
           f"transforms {{ output {{ dtype: {proto} layout: LAYOUT_NCHW }} }}")
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    level = 1 / (255 * std)
    rtol = 1e-3 if dtype == "float32" else 2 ** -8 + 1e-3
    for name, img in IMAGES.items():
        for stream in range(16):
            ours, plan = run_chain(img, ops, *size, seed=13, stream=stream,
                                   dtype=np.float32 if dtype == "float32" else "bfloat16",
                                   nchw=True)
            ours = torch.from_numpy(ours.copy())
            stage = geometric_stage(img, GEOMETRY, plan, size, 13, stream)
            theirs = (replay_chain(img, plan, size, stage).float() / 255 - mean) / std
            bound = 1e-3 * level + rtol * theirs.abs()
            assert bool(((ours - theirs).abs() <= bound).all()), (name, stream, plan)
            whole = (replay_chain(img, plan, size).float() / 255 - mean) / std
            within = (ours - whole).abs() <= level + bound
            assert 1 - float(within.float().mean()) < 0.2, (name, stream, plan)


@pytest.mark.parametrize("rotate", ["rotate { degrees: 30 }", "rotate { degrees: [-180, 180] p: 0.7 }"])
def test_rotate_chain_matches_torchvision_rotate(rotate):
    """random_resized_crop (bicubic, as in the policy test) + the rotation: the drawn angle replayed
    through F.rotate (NEAREST, expand=False, fill zeros) from Sluice's geometric stage and from
    torchvision's. Nearest-neighbour picks may differ at exact .5 ties, as the policies' affine
    ops may (test_torchvision_policy.py)."""
    size = (56, 56)
    geometry = ("transforms { random_resized_crop { size: [56, 56] "
                "interpolation: INTERPOLATION_BICUBIC } } ")
    ops = geometry + f"transforms {{ {rotate} }}"
    angles = []
    for name, img in IMAGES.items():
        for stream in range(16):
            ours, plan = run_chain(img, ops, *size, seed=23, stream=stream)
            angles += [d["params"][0] for d in plan["draws"]]
            stage = geometric_stage(img, geometry, plan, size, 23, stream)
            for theirs in (replay_chain(img, plan, size, stage), replay_chain(img, plan, size)):
                diff = np.abs(ours.astype(np.int16) - hwc(theirs).astype(np.int16)).max(axis=-1)
                far = float(np.mean(diff > 1))
                assert far < AFFINE_MAX_DIFFERING, (name, stream, plan, far)
    limit = 30 if "30" in rotate else 180
    assert angles and all(-limit <= a <= limit for a in angles), angles
    assert max(angles) - min(angles) > limit / 2, angles  # the range is drawn across, not a constant


@pytest.mark.parametrize("policy", ["trivial_augment_wide { }",
                                    "rand_augment { num_ops: 2 magnitude: 9 }",
                                    "rand_augment { num_ops: 3 magnitude: 20 }"])
def test_policy_chain_matches_torchvision_replay(policy):
    """random_resized_crop (bicubic: torchvision's arithmetic, so the geometric stage is nearly
    exact) + a random flip + the policy: the draws name torchvision's op and signed magnitude,
    replayed through _apply_op (NEAREST, fill zeros) from torchvision's geometry. Up to one level
    per op, and the affine ops' .5 ties, as test_torchvision_policy.py allows."""
    size = (56, 56)
    geometry = ("transforms { random_resized_crop { size: [56, 56] "
                "interpolation: INTERPOLATION_BICUBIC } } transforms { flip { } } ")
    ops = geometry + f"transforms {{ {policy} }}"
    num_ops = 1 if policy.startswith("trivial") else int(policy.split("num_ops: ")[1].split()[0])
    seen = set()
    for name, img in IMAGES.items():
        for stream in range(20):
            ours, plan = run_chain(img, ops, *size, seed=17, stream=stream)
            assert len(plan["draws"]) == num_ops, plan
            seen.update(d["name"] for d in plan["draws"])
            stage = geometric_stage(img, geometry, plan, size, 17, stream)
            for theirs in (replay_chain(img, plan, size, stage), replay_chain(img, plan, size)):
                diff = np.abs(ours.astype(np.int16) - hwc(theirs).astype(np.int16)).max(axis=-1)
                far = float(np.mean(diff > num_ops))
                assert far < AFFINE_MAX_DIFFERING, (name, stream, plan, far)
    assert len(seen) >= 8, seen
