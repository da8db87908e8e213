"""Flat buffers and the pieces they travel in (hetlab.core.flat; the actors run here as plain objects, no Ray)."""
import numpy as np
import torch

from hetlab.core.data import load_mnist
from hetlab.core.flat import INLINE_BYTES, MOST_PIECES, PIECE_BYTES, join_pieces, pieces_for, split_pieces
from hetlab.ps.messages import open_answer
from hetlab.ps.server import Server
from hetlab.ps.specs import WorkerSpec
from hetlab.ps.worker import Worker


def test_pieces_fit_inside_a_ray_call_and_big_buffers_go_whole():
    assert PIECE_BYTES < INLINE_BYTES
    assert pieces_for(4 * 1_960) == 1                 # Ray's example ConvNet: already small
    assert pieces_for(4 * 29_066) == 2                # the course's model, fp32: 116 KB
    assert pieces_for(2 * 29_066) == 1                # ... fp16: 58 KB
    assert pieces_for(MOST_PIECES * PIECE_BYTES) == MOST_PIECES
    assert pieces_for(MOST_PIECES * PIECE_BYTES + 1) == 1   # big: one object, through the store


def test_split_and_join_give_back_the_same_bits_in_small_copies():
    flat = torch.randn(29_066)
    pieces = split_pieces(flat, 3)  # inside the call: numpy arrays, which Ray moves as raw bytes
    assert len(pieces) == 3 and all(isinstance(p, np.ndarray) and p.nbytes < INLINE_BYTES for p in pieces)
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
    worker = Worker(WorkerSpec("w", device="cpu"), load_mnist("train").subset(256, seed=0), "small")
    servers = [Server("small", seed=0, lr=1e-3, mode="sync") for _ in range(2)]
    weights = servers[0].weights()
    (grad,), meta = open_answer([worker.gradient([(0, 64)], weights)])        # one piece: one object
    grad_pieces, meta2 = open_answer(worker.gradient([(0, 64)], *split_pieces(weights, 2), pieces=2))
    assert len(grad_pieces) == 2 and torch.equal(join_pieces(grad_pieces), grad) and meta2.loss == meta.loss
    whole = servers[0].apply([0.25, 0.75], [grad, grad * 2]).weights
    joined = servers[1].apply([0.25, 0.75], [join_pieces(grad_pieces), join_pieces([p * 2 for p in grad_pieces])]).weights
    assert torch.equal(joined, whole) and torch.equal(join_pieces(split_pieces(whole, 3)), whole)
    assert torch.equal(servers[1].weights(), whole)
