"""Arrays across the trust boundary: plain .npy in, everything checked before it is read."""

from __future__ import annotations

import io
import pickle
import zipfile

import ml_dtypes
import numpy as np
import pytest

from nkitui.executor.arrays import ArrayTransferError, load_array, save_array


def test_plain_and_narrow_arrays_round_trip(tmp_path):
    for arr in (np.arange(12, dtype=np.float32).reshape(3, 4), np.arange(5, dtype=np.int64),
                np.linspace(-2, 2, 7).astype(ml_dtypes.bfloat16), np.array([0.5, -1], dtype=ml_dtypes.float8_e4m3)):
        meta = save_array(tmp_path / "a.npy", arr)
        back = load_array(tmp_path, meta, max_elements=100)
        assert back.dtype == arr.dtype and back.shape == arr.shape
        assert np.array_equal(back.astype(np.float64), arr.astype(np.float64))


def test_objects_cannot_be_sent(tmp_path):
    with pytest.raises(ArrayTransferError, match="only arrays of numbers"):
        save_array(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object))


def test_a_pickle_or_an_object_array_on_disk_is_refused_before_it_is_read(tmp_path):
    np.save(tmp_path / "o.npy", np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(ArrayTransferError, match="claims float32 but stores object"):
        load_array(tmp_path, {"file": "o.npy", "dtype": "float32"}, max_elements=10)
    (tmp_path / "p.npy").write_bytes(pickle.dumps({"not": "an array"}))
    with pytest.raises(ArrayTransferError, match="not a readable .npy file"):
        load_array(tmp_path, {"file": "p.npy", "dtype": "float32"}, max_elements=10)


def test_a_claimed_dtype_must_be_the_stored_one(tmp_path):
    meta = save_array(tmp_path / "a.npy", np.zeros(4, np.float64))
    with pytest.raises(ArrayTransferError, match="claims float32 but stores float64"):
        load_array(tmp_path, dict(meta, dtype="float32"), max_elements=10)
    with pytest.raises(ArrayTransferError, match="claims bfloat16 but stores float64"):
        load_array(tmp_path, dict(meta, dtype="bfloat16"), max_elements=10)


def test_a_huge_header_is_refused_without_reading_the_data(tmp_path):
    path = tmp_path / "big.npy"
    with open(path, "wb") as f:  # a header claiming 10**12 float32 elements and no data at all
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)})
        f.write(b"\0" * 16)
    with pytest.raises(ArrayTransferError, match="holds 1000000000000 elements, more than the 100"):
        load_array(tmp_path, {"file": "big.npy", "dtype": "float32"}, max_elements=100)


@pytest.mark.parametrize("name", ["../a.npy", "/etc/passwd", "", "..", "sub/a.npy"])
def test_a_file_name_may_not_leave_its_folder(tmp_path, name):
    with pytest.raises(ArrayTransferError, match="leaves its folder"):
        load_array(tmp_path, {"file": name, "dtype": "float32"}, max_elements=10)


def test_a_link_or_a_missing_file_is_refused(tmp_path):
    np.save(tmp_path / "real.npy", np.zeros(3, np.float32))
    (tmp_path / "link.npy").symlink_to(tmp_path / "real.npy")
    with pytest.raises(ArrayTransferError, match="missing or not a regular file"):
        load_array(tmp_path, {"file": "link.npy", "dtype": "float32"}, max_elements=10)
    with pytest.raises(ArrayTransferError, match="missing or not a regular file"):
        load_array(tmp_path, {"file": "absent.npy", "dtype": "float32"}, max_elements=10)
    with pytest.raises(ArrayTransferError, match="description is not"):
        load_array(tmp_path, ["not", "a", "dict"], max_elements=10)


def test_an_npz_archive_is_not_an_npy(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("a.npy", b"x")
    (tmp_path / "z.npy").write_bytes(buffer.getvalue())
    with pytest.raises(ArrayTransferError, match="not a readable .npy file"):
        load_array(tmp_path, {"file": "z.npy", "dtype": "float32"}, max_elements=10)


# -- the writer and reader without whole-file copies (issue #14, helper speed15) ----------------------
ODD_ARRAYS = [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.arange(12.0).reshape(3, 4)[:, ::2],  # not contiguous
    np.asarray(np.float64(3.5)),  # 0-d stays 0-d
    np.zeros((0, 3), np.int8),
    np.array([True, False]),
    np.array([1 + 2j, -3j], np.complex64),
    np.arange(4, dtype=">f4"),  # big-endian, as np.save keeps it
    np.linspace(-2, 2, 7).astype(ml_dtypes.bfloat16),
]


@pytest.mark.parametrize("arr", ODD_ARRAYS, ids=lambda a: f"{a.dtype}{a.shape}")
def test_the_file_is_the_bytes_np_save_writes_and_reads_back_as_np_load_reads_it(tmp_path, arr):
    meta = save_array(tmp_path / "a.npy", arr)
    expected = io.BytesIO()
    np.save(expected, arr.view(f"u{arr.dtype.itemsize}") if arr.dtype.kind == "V" else arr, allow_pickle=False)
    assert (tmp_path / "a.npy").read_bytes() == expected.getvalue()
    back = load_array(tmp_path, meta, max_elements=100, require_digest=True)
    assert back.dtype == arr.dtype and back.shape == arr.shape
    assert back.tobytes() == arr.tobytes()
    assert back.flags.writeable and back.flags.aligned


def test_a_fortran_ordered_file_reads_back_in_its_order(tmp_path):
    arr = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    np.save(tmp_path / "f.npy", arr)
    assert np.array_equal(load_array(tmp_path, {"file": "f.npy", "dtype": "float64"}, max_elements=10), arr)


def test_inputs_sent_without_a_digest_are_refused_where_one_is_required(tmp_path):
    meta = save_array(tmp_path / "a.npy", np.ones(3, np.float32), digest=False)
    assert "sha256" not in meta
    assert load_array(tmp_path, meta, max_elements=10).tolist() == [1, 1, 1]
    with pytest.raises(ArrayTransferError, match="without the digest"):
        load_array(tmp_path, meta, max_elements=10, require_digest=True)


def test_a_rewritten_or_truncated_file_is_refused(tmp_path):
    meta = save_array(tmp_path / "a.npy", np.arange(8, dtype=np.float32))
    data = (tmp_path / "a.npy").read_bytes()
    (tmp_path / "a.npy").write_bytes(data[:-4] + b"\0\0\0\0")
    with pytest.raises(ArrayTransferError, match="changed after it was written"):
        load_array(tmp_path, meta, max_elements=10, require_digest=True)
    (tmp_path / "a.npy").write_bytes(data[:-4])
    with pytest.raises(ArrayTransferError, match="fewer bytes than its header"):
        load_array(tmp_path, {k: v for k, v in meta.items() if k != "sha256"}, max_elements=10)
