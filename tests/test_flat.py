"""Flat buffers and the pieces they travel in (hetlab.core.flat; the actors run here as plain objects, no Ray)."""
import numpy as np
import torch

from hetlab.core.data import load_mnist
from hetlab.core.flat import MOST_PIECES, PIECE_BYTES, join_pieces, pieces_for, split_pieces
from hetlab.ps.server import Server
from hetlab.ps.specs import WorkerSpec
from hetlab.ps.worker import Worker


def test_pieces_fit_inside_a_ray_call_and_big_buffers_go_whole():
    assert PIECE_BYTES < 100 * 1024                   # Ray's max_direct_call_object_size, with room for pickling
    assert pieces_for(4 * 1_960) == 1                 # Ray's example ConvNet: already small
    assert pieces_for(4 * 29_066) == 2                # the course's model, fp32: 116 KB
    assert pieces_for(2 * 29_066) == 1                # ... fp16: 58 KB
    assert pieces_for(MOST_PIECES * PIECE_BYTES) == MOST_PIECES
    assert pieces_for(MOST_PIECES * PIECE_BYTES + 1) == 1   # big: one object, through the store


def test_split_and_join_give_back_the_same_bits_in_small_copies():
    flat = torch.randn(29_066)
    pieces = split_pieces(flat, 3)  # inside the call: numpy arrays, which Ray moves as raw bytes
    assert len(pieces) == 3 and all(isinstance(p, np.ndarray) and p.nbytes < PIECE_BYTES for p in pieces)
    assert torch.equal(join_pieces(pieces), flat)
    read_only = [p.copy() for p in pieces]
    for p in read_only:
        p.flags.writeable = False  # as Ray hands them over
    joined = join_pieces(read_only)
    joined += 1  # a new tensor: writing to it leaves the pieces alone
    assert torch.equal(torch.from_numpy(np.concatenate(read_only)), flat)
    big = torch.randn(PIECE_BYTES // 4 + 1)  # one piece too big for the call: the tensor itself
    assert split_pieces(big, 1)[0] is big and join_pieces((big,)) is big
    half = flat.to(torch.bfloat16)  # numpy has no bfloat16: torch tensors on the wire
    assert all(isinstance(p, torch.Tensor) for p in split_pieces(half, 2))
    assert torch.equal(join_pieces(split_pieces(half, 2)), half)


def test_a_step_in_pieces_equals_the_step_in_one_buffer():
    data = load_mnist("train").subset(256, seed=0)
    workers = [Worker(WorkerSpec("w", device="cpu"), data, "small", pieces=k) for k in (1, 2)]
    servers = [Server("small", seed=0, lr=1e-3, mode="sync") for _ in range(2)]
    weights = servers[0].weights()
    *one, reply = workers[0].gradient([(0, 64)], weights)                     # one piece: the tensor itself
    *two, reply2 = workers[1].gradient([(0, 64)], *split_pieces(weights, 2))
    assert len(one) == 1 and len(two) == 2 and torch.equal(join_pieces(two), join_pieces(one))
    assert reply2[0] == reply[0] and reply[3] == 64                            # the same loss, 64 samples
    grad, pieced = join_pieces(one), join_pieces(two)
    servers[0].apply([grad, grad * 2], [16, 48])
    servers[1].apply([pieced, join_pieces([p * 2 for p in two])], [16, 48])
    whole = servers[0].weights()
    assert torch.equal(servers[1].weights(), whole) and torch.equal(join_pieces(split_pieces(whole, 3)), whole)
