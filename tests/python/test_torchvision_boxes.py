"""Boxes through a transform list (pipeline/box_transform.h, PlanGeometry's BoxMap) against
torchvision moving the same boxes' pixels.

torchvision.transforms.v2, whose box kernels Sluice follows, needs torch >= 2.0; this machine has
Debian's torch 1.13 / torchvision 0.14 (0.15's v2 does not import on 1.13). So each box becomes a
binary mask of the source image's size with the box's pixels set, the mask goes through the very
crops, pads, resizes and flips Sluice drew (read from pixel_ops_probe's "chain" JSON, as
test_torchvision_chain.py replays the pixels) with torchvision.transforms.functional (NEAREST),
and torchvision.ops.masks_to_boxes of the result is compared with Sluice's box x output size.
The boxes lie on whole source pixels, so crops, pads and flips move a mask exactly: there the two
agree to float32 rounding. A resize moves a mask edge to the nearest whole output pixel (nearest
neighbour samples at pixel starts), so there they agree within one output pixel. A box Sluice
drops is one whose mask is empty, or narrower or lower than min_size, or (min_overlap) whose
mask kept less than that share of its pixels."""
import json
import os
import subprocess
import tempfile
import urllib.parse

import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F
from torchvision.ops import masks_to_boxes
from torchvision.transforms import InterpolationMode

H, W = 97, 131
NEAREST = InterpolationMode.NEAREST
EXACT = 1e-3   # float32 coordinates times the output size
RESIZED = 1.0  # nearest-neighbour resampling of a mask edge


def random_boxes(rng, count):
    """Whole-pixel boxes [x0, y0, x1, y1) of the source, some along its edges and corners."""
    x0 = rng.integers(0, W - 1, count)
    y0 = rng.integers(0, H - 1, count)
    x1 = np.minimum(W, x0 + rng.integers(1, W // 2, count))
    y1 = np.minimum(H, y0 + rng.integers(1, H // 2, count))
    boxes = np.stack([x0, y0, x1, y1], 1)
    boxes[:3] = [[0, 0, W, H], [0, 0, 10, 12], [W - 20, H - 8, W, H]]
    return boxes


def sluice_boxes(transforms, out_h, out_w, boxes, stream, **params):
    """What the chain does to the boxes: (plan JSON, {input index: box in output pixels})."""
    exe = os.environ["PIXEL_OPS_PROBE"]
    coords = ",".join(repr(float(v)) for b in boxes
                      for v in (b[0] / W, b[1] / H, b[2] / W, b[3] / H))
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.rgb"), os.path.join(d, "out.bin")
        np.zeros((H, W, 3), np.uint8).tofile(src)
        args = [exe, src, str(W), str(H), dst, "chain",
                "list=" + urllib.parse.quote(transforms, safe=""), f"out_width={out_w}",
                f"out_height={out_h}", "seed=7", f"stream={stream}", f"boxes={coords}"]
        args += [f"{k}={v}" for k, v in params.items()]
        run = subprocess.run(args, capture_output=True, text=True)
        assert run.returncode == 0, f"{' '.join(args)}: {run.stderr}"
        with open(dst + ".json") as f:
            plan = json.load(f)
    scale = np.array([out_w, out_h, out_w, out_h], np.float64)
    kept = {i: np.array(b) * scale for i, b in zip(plan["kept"], plan["boxes"])}
    return plan, kept


def masks(boxes):
    m = torch.zeros((len(boxes), H, W), dtype=torch.uint8)
    for i, (x0, y0, x1, y1) in enumerate(boxes):
        m[i, y0:y1, x0:x1] = 1
    return m


def window(plan):
    """The map's window in source pixels (left, top, width, height): whole pixels for crops."""
    x0, y0, w, h = plan["box_map"][:4]
    return round(x0 * W), round(y0 * H), w * W, h * H


def flipped(m, plan):
    if plan["flip_horizontal"]:
        m = F.hflip(m)
    if plan["flip_vertical"]:
        m = F.vflip(m)
    return m


def compare(boxes, moved, kept, tolerance, min_size, min_overlap, plan):
    """Sluice's kept boxes against the moved masks, box by box. Returns (kept, dropped) counts.
    The share of a box's pixels a mask kept is its area's share only without a resize, so
    min_overlap is only tested with crops."""
    for i, (bx0, by0, bx1, by1) in enumerate(boxes):
        m = moved[i]
        info = (i, boxes[i].tolist(), plan)
        if not m.any():
            assert i not in kept, ("nothing left in torchvision, kept by Sluice", info, kept.get(i))
            continue
        x0, y0, x2, y2 = masks_to_boxes(m[None])[0].tolist()
        theirs = np.array([x0, y0, x2 + 1, y2 + 1])
        too_small = min(theirs[2] - theirs[0], theirs[3] - theirs[1]) < min_size + tolerance
        share = m.sum().item() / ((bx1 - bx0) * (by1 - by0))
        too_little = min_overlap > 0 and share < min_overlap + 1e-6
        if i not in kept:
            assert too_small or too_little, ("dropped by Sluice only", info, theirs, share)
            continue
        assert np.abs(kept[i] - theirs).max() <= tolerance, (info, kept[i], theirs)
        assert min_overlap == 0 or share >= min_overlap - 1e-6, (info, share)
    return len(kept), len(boxes) - len(kept)


def run_case(transforms, out_hw, replay, tolerance, streams=16, **params):
    rng = np.random.default_rng(3)
    totals = np.zeros(2, int)
    for stream in range(streams):
        boxes = random_boxes(rng, 24)
        plan, kept = sluice_boxes(transforms, *out_hw, boxes, stream, **params)
        moved = replay(masks(boxes), plan)
        assert tuple(moved.shape[1:]) == out_hw, plan
        totals += compare(boxes, moved, kept, tolerance, float(params.get("min_size", 1)),
                          float(params.get("min_overlap", 0)), plan)
    assert totals[0] > 0, totals
    return totals


def test_random_resized_crop_and_flips_move_boxes_as_resized_crop_of_masks():
    out = (48, 56)
    ops = ("transforms { random_resized_crop { size: [48, 56] } } "
           "transforms { flip { horizontal_p: 0.5 vertical_p: 0.5 } }")

    def replay(m, plan):
        s = plan["source"]
        return flipped(F.resized_crop(m, s["y"], s["x"], s["height"], s["width"], list(out),
                                      interpolation=NEAREST), plan)

    kept, dropped = run_case(ops, out, replay, RESIZED, streams=24)
    assert dropped > 0


def test_imagenet_train_preset_moves_boxes_as_its_crop_and_flip():
    out = (64, 64)

    def replay(m, plan):
        s = plan["source"]
        return flipped(F.resized_crop(m, s["y"], s["x"], s["height"], s["width"], list(out),
                                      interpolation=NEAREST), plan)

    run_case("transforms { preset: PRESET_IMAGENET_TRAIN }", out, replay, RESIZED, streams=24)


@pytest.mark.parametrize("size", [(60, 90), (150, 200), (80, 160)])
def test_center_crop_clamps_boxes_as_center_crop_of_masks_exactly(size):
    """Smaller, larger (its padding is no part of any box) and larger on one axis only."""
    def replay(m, plan):
        return F.center_crop(m, list(size))

    run_case(f"transforms {{ center_crop {{ size: {list(size)} }} }}", size, replay, EXACT,
             streams=2)


@pytest.mark.parametrize("size,padding", [((64, 64), 4), ((90, 120), 30)])
def test_padded_random_crop_and_flips_move_boxes_as_pad_crop_flip_of_masks_exactly(size,
                                                                                 padding):
    ops = (f"transforms {{ random_crop {{ size: {list(size)} padding: {padding} }} }} "
           "transforms { flip { horizontal_p: 0.5 vertical_p: 0.5 } }")

    def replay(m, plan):
        left, top, _, _ = window(plan)
        return flipped(F.crop(F.pad(m, [padding]), top + padding, left + padding, *size), plan)

    kept, dropped = run_case(ops, size, replay, EXACT)
    assert dropped > 0


def test_crop_padded_past_an_earlier_crop_keeps_only_what_both_kept():
    """center_crop 60x80, then random_crop 60x80 with padding 20: the second window reaches into
    source pixels the first one cut off (and into zeros); a box keeps only the intersection."""
    ops = ("transforms { center_crop { size: [60, 80] } } "
           "transforms { random_crop { size: [60, 80] padding: 20 } } "
           "transforms { flip { horizontal_p: 0.5 } }")
    cc_left, cc_top = round((W - 80) / 2), round((H - 60) / 2)

    def replay(m, plan):
        left, top, _, _ = window(plan)
        first = F.center_crop(m, [60, 80])
        return flipped(F.crop(F.pad(first, [20]), top - cc_top + 20, left - cc_left + 20, 60, 80),
                       plan)

    kept, dropped = run_case(ops, (60, 80), replay, EXACT)
    assert dropped > 0


def test_resize_then_center_crop_moves_boxes_within_a_pixel():
    def replay(m, plan):
        return F.center_crop(F.resize(m, 80, interpolation=NEAREST), [64, 64])

    run_case("transforms { resize { shorter_side: 80 } } "
             "transforms { center_crop { size: [64, 64] } }", (64, 64), replay, RESIZED,
             streams=2)


def test_min_size_drops_boxes_narrower_or_lower_than_it_in_output_pixels():
    size, padding = (64, 64), 8
    ops = f"transforms {{ random_crop {{ size: {list(size)} padding: {padding} }} }}"

    def replay(m, plan):
        left, top, _, _ = window(plan)
        return F.crop(F.pad(m, [padding]), top + padding, left + padding, *size)

    kept, dropped = run_case(ops, size, replay, EXACT, min_size=12)
    assert kept > 10 and dropped > 10


def test_min_overlap_drops_boxes_the_crop_kept_too_little_of():
    size = (50, 60)
    ops = f"transforms {{ random_crop {{ size: {list(size)} }} }}"

    def replay(m, plan):
        left, top, _, _ = window(plan)
        return F.crop(m, top, left, *size)

    kept, dropped = run_case(ops, size, replay, EXACT, min_overlap=0.37)
    assert kept > 10 and dropped > 10
