"""The linear grey-level map shared by page contrast stretching and levelled line input (grey_levels.py)."""

from __future__ import annotations

import numpy as np

from appliance.grey_levels import MIN_SPREAD, map_levels


def test_the_two_levels_land_where_asked_and_the_rest_in_between_clipped() -> None:
    image = np.array([[[40] * 3, [100] * 3, [160] * 3, [0] * 3, [255] * 3]], np.uint8)
    out = map_levels(image, 40, 160, (50, 250))
    assert out[0, :, 0].tolist() == [50, 150, 250, 0, 255]  # 0 and 255 fall outside and clip
    assert map_levels(image, 40, 160)[0, :, 0].tolist() == [0, 128, 255, 0, 255]  # to black..white


def test_channels_are_mapped_alike_so_their_order_is_kept() -> None:
    image = np.zeros((2, 2, 3), np.uint8)
    image[..., 0], image[..., 1], image[..., 2] = 40, 100, 160
    out = map_levels(image, 40, 160)
    assert out[0, 0].tolist() == [0, 128, 255]


def test_levels_closer_than_the_minimum_spread_leave_the_image_as_it_is() -> None:
    image = np.full((4, 4, 3), 200, np.uint8)
    image[0, 0] = 200 - MIN_SPREAD + 1
    assert map_levels(image, 200 - MIN_SPREAD + 1, 200) is image
