"""Per-tile error summary of one output, small enough for the UI to draw as a heat map.

The output is seen as a matrix: rows = every axis but the last (flattened; axis 0 is where NKI
puts the 128 partitions), columns = the last axis. It is cut into tiles of `tile_rows` x
`tile_cols` (128 partitions x 512 fp32 PSUM columns by default) and each cell records the
largest absolute error and the number of mismatches under the task's policy. When there are more
than `max_cells` tiles along an axis, neighbouring tiles are merged so the grid stays small.

`localise` answers the auditor's question "are the failures everywhere, or in one tile?" on the
unmerged tile grid, so an off-by-one on the last partial tile is named precisely.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nkitui.common.codec import Record


DEFAULT_TILE = (128, 512)
MAX_CELLS = 64


def as_matrix_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], 1
    return int(np.prod(shape[:-1])), shape[-1]


@dataclass(frozen=True)
class TileHeatmap(Record):
    shape: tuple[int, int]  # the output seen as rows x cols
    tile: tuple[int, int]  # one tile: rows x cols
    cell: tuple[int, int]  # one heat-map cell: rows x cols (a multiple of the tile when merged)
    row_edges: tuple[int, ...]  # cell i covers rows row_edges[i] .. row_edges[i+1]-1
    col_edges: tuple[int, ...]
    max_abs: tuple[tuple[float, ...], ...]  # [cell row][cell col]; inf where a non-finite mismatch sits
    mismatches: tuple[tuple[int, ...], ...]
    elements: tuple[tuple[int, ...], ...]

    @property
    def grid(self) -> tuple[int, int]:
        return len(self.row_edges) - 1, len(self.col_edges) - 1


def _edges(n: int, step: int, max_cells: int) -> tuple[tuple[int, ...], int]:
    tiles = max(1, math.ceil(n / step))
    merge = max(1, math.ceil(tiles / max_cells))
    cell = step * merge
    edges = list(range(0, n, cell)) + [n]
    return tuple(edges), cell


def _reduce_blocks(values: np.ndarray, row_edges: tuple[int, ...], col_edges: tuple[int, ...], op: np.ufunc,
                   dtype: type[np.generic] | None = None) -> np.ndarray:
    rows = op.reduceat(values, list(row_edges[:-1]), axis=0, dtype=dtype)
    blocks: np.ndarray = op.reduceat(rows, list(col_edges[:-1]), axis=1)
    return blocks


def tile_heatmap(
    abs_error: np.ndarray,
    mismatch: np.ndarray,
    tile: tuple[int, int] = DEFAULT_TILE,
    max_cells: int = MAX_CELLS,
) -> TileHeatmap:
    """Summarise `abs_error` (float64, inf at non-finite mismatches) and `mismatch` (bool) per tile."""
    rows, cols = as_matrix_shape(tuple(abs_error.shape))
    err = np.asarray(abs_error, dtype=np.float64).reshape(rows, cols)
    bad = np.asarray(mismatch, dtype=bool).reshape(rows, cols)
    tile_r, tile_c = max(1, int(tile[0])), max(1, int(tile[1]))
    row_edges, cell_r = _edges(rows, tile_r, max_cells)
    col_edges, cell_c = _edges(cols, tile_c, max_cells)
    if err.size == 0:
        return TileHeatmap((rows, cols), (tile_r, tile_c), (cell_r, cell_c), row_edges, col_edges, (), (), ())
    if np.isnan(err).any():
        err = np.where(np.isnan(err), np.inf, err)
    max_abs = _reduce_blocks(err, row_edges, col_edges, np.maximum)
    counts = _reduce_blocks(bad, row_edges, col_edges, np.add, dtype=np.int64)
    sizes = np.outer(np.diff(row_edges), np.diff(col_edges))
    return TileHeatmap(
        shape=(rows, cols),
        tile=(tile_r, tile_c),
        cell=(cell_r, cell_c),
        row_edges=row_edges,
        col_edges=col_edges,
        max_abs=tuple(tuple(float(v) for v in row) for row in max_abs),
        mismatches=tuple(tuple(int(v) for v in row) for row in counts),
        elements=tuple(tuple(int(v) for v in row) for row in sizes),
    )


@dataclass(frozen=True)
class Localisation(Record):
    """Where the mismatches of one output sit."""

    mismatches: int
    rows: tuple[int, int]  # first and last row holding a mismatch
    cols: tuple[int, int]
    row_tiles: tuple[int, ...]  # indices of the row tiles (tile_rows each) that hold mismatches
    col_tiles: tuple[int, ...]
    n_row_tiles: int
    n_col_tiles: int
    last_row_tile_partial: bool
    last_col_tile_partial: bool
    concentrated: bool  # all mismatches in a small part (<= 1/4 of the tiles, and not every tile)
    summary: str  # one sentence


def _span(tiles: tuple[int, ...], n: int, partial: bool, axis: str) -> str:
    if len(tiles) == n:
        return f"every {axis} tile"
    if len(tiles) == 1:
        t = tiles[0]
        if t == n - 1 and n > 1:
            return f"only the last {axis} tile" + (" (a partial tile)" if partial else "")
        if t == 0 and n > 1:
            return f"only the first {axis} tile"
        return f"only {axis} tile {t}"
    return f"{len(tiles)} of {n} {axis} tiles"


def localise(mismatch: np.ndarray, tile: tuple[int, int] = DEFAULT_TILE) -> Localisation | None:
    """Describe where the mismatches are; None when there are none."""
    rows, cols = as_matrix_shape(tuple(mismatch.shape))
    bad = np.asarray(mismatch, dtype=bool).reshape(rows, cols)
    count = int(bad.sum())
    if count == 0:
        return None
    tile_r, tile_c = max(1, int(tile[0])), max(1, int(tile[1]))
    row_hit, col_hit = bad.any(axis=1), bad.any(axis=0)
    bad_rows, bad_cols = np.flatnonzero(row_hit), np.flatnonzero(col_hit)
    n_rt, n_ct = math.ceil(rows / tile_r), math.ceil(cols / tile_c)
    row_tiles = tuple(int(t) for t in np.flatnonzero(np.logical_or.reduceat(row_hit, np.arange(0, rows, tile_r))))
    col_tiles = tuple(int(t) for t in np.flatnonzero(np.logical_or.reduceat(col_hit, np.arange(0, cols, tile_c))))
    partial_r, partial_c = rows % tile_r != 0, cols % tile_c != 0
    tiles_hit = len(row_tiles) * len(col_tiles)
    concentrated = tiles_hit < n_rt * n_ct and tiles_hit <= max(1, (n_rt * n_ct) // 4)
    r0, r1, c0, c1 = int(bad_rows[0]), int(bad_rows[-1]), int(bad_cols[0]), int(bad_cols[-1])
    summary = (
        f"{count} mismatching element(s) in rows {r0}-{r1} and columns {c0}-{c1}: "
        f"{_span(row_tiles, n_rt, partial_r, 'row')} of {tile_r}, {_span(col_tiles, n_ct, partial_c, 'column')} of {tile_c}"
    )
    return Localisation(
        mismatches=count,
        rows=(r0, r1),
        cols=(c0, c1),
        row_tiles=row_tiles,
        col_tiles=col_tiles,
        n_row_tiles=n_rt,
        n_col_tiles=n_ct,
        last_row_tile_partial=partial_r,
        last_col_tile_partial=partial_c,
        concentrated=concentrated,
        summary=summary,
    )
