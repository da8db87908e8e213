"""hetlab's exchange (``hetlab.raytrain.exchange``) between two real processes, no Ray: the
collectives Ray Train's ranks call, through torch's rendezvous store on 127.0.0.1.

macOS cannot exist here. What stands in for it is the one thing about a Mac's torch that decides
this: gloo's Linux transport is not there. ``GLOO_DEVICE_TRANSPORT=UV`` in the "mac" rank's
environment makes this Linux torch refuse gloo at once ("unsupported gloo device"), as a Mac's gloo
can never meet a Linux rank (../shared/measured/2026-12-01-gloo-tcp-uv.md). Not modelled: MPS, the
Mac's own TCP stack (the store's protocol is torch's, the same bytes on both systems).
"""
import multiprocessing
import os
import socket
from datetime import timedelta

import pytest
import torch

MAC_STANDIN = {"GLOO_DEVICE_TRANSPORT": "UV"}     # gloo's TCP transport unavailable, as on macOS


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, backend: str, port: int, env: dict, out) -> None:
    """One rank: its unequal share of 100 MNIST samples (80 or 20), b_i/B times its gradient
    all-reduced; then an object gather and a barrier. Puts what it saw, or its error."""
    os.environ.update(env)
    import torch.distributed as dist

    from hetlab.core.data import load_mnist
    from hetlab.core.flat import flat_grad
    from hetlab.core.models import make_model
    from hetlab.raytrain import exchange

    torch.set_num_threads(1)
    try:
        exchange.register()
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                                timeout=timedelta(seconds=30))
        data = load_mnist("train").subset(100, seed=1)
        x, y = data.normalized(), data.labels
        lo, hi = (0, 80) if rank == 0 else (80, 100)
        model = make_model("small", seed=0)
        torch.nn.functional.cross_entropy(model(x[lo:hi]), y[lo:hi]).backward()
        buf = flat_grad(model) * ((hi - lo) / 100)
        dist.all_reduce(buf)
        names = [None, None]
        dist.all_gather_object(names, {"rank": rank, "backend": dist.get_backend()})
        dist.barrier()
        out.put((rank, buf.numpy(), names))   # arrays: a tensor in a queue is shared memory
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - the test reads the line
        out.put((rank, f"{type(e).__name__}: {str(e).splitlines()[0]}"))


def _pair(backend: str, mac_env: dict) -> dict:
    ctx = multiprocessing.get_context("spawn")
    out, port = ctx.Queue(), _port()
    procs = [ctx.Process(target=_rank, args=(r, backend, port, env, out)) for r, env in ((0, {}), (1, mac_env))]
    for p in procs:
        p.start()
    got = {}
    try:
        while len(got) < 2:
            rank, *rest = out.get(timeout=90)
            got[rank] = rest
            if isinstance(rest[0], str):     # one rank failed: the other may wait for it
                break
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
    return got


def test_unequal_shares_through_the_exchange_give_the_big_batchs_gradient_with_a_mac_standin():
    from hetlab.core.data import load_mnist
    from hetlab.core.flat import flat_grad
    from hetlab.core.models import make_model

    got = _pair("hetlab", MAC_STANDIN)
    assert all(not isinstance(v[0], str) for v in got.values()), got
    data = load_mnist("train").subset(100, seed=1)
    model = make_model("small", seed=0)
    torch.nn.functional.cross_entropy(model(data.normalized()), data.labels).backward()
    big = flat_grad(model)
    (g0, names), (g1, _) = ([torch.as_tensor(got[r][0]), got[r][1]] for r in (0, 1))
    assert torch.equal(g0, g1)                                     # the same bits on both ranks
    assert torch.allclose(g0, big, atol=1e-6)                      # = one step on the big batch
    assert names == [{"rank": 0, "backend": "hetlab"}, {"rank": 1, "backend": "hetlab"}]


def test_gloo_fails_at_once_where_a_mac_would_never_connect():
    got = _pair("gloo", MAC_STANDIN)
    assert "unsupported gloo device" in got[1][0], got


def test_a_rank_left_alone_says_so_in_one_line():
    """Rank 1 never comes: rank 0's first collective gives up after the process group's timeout."""
    import torch.distributed as dist

    from hetlab.raytrain import exchange

    exchange.register()
    store = dist.TCPStore("127.0.0.1", 0, 2, True, timedelta(seconds=2), wait_for_workers=False)
    group = exchange.StoreExchange(dist.PrefixStore("t", store), 0, 2, timedelta(seconds=2))
    with pytest.raises(RuntimeError, match=r"^rank 0 gave up waiting for the other ranks at collective 1 after 2 s") as e:
        group.allreduce([torch.ones(3)])
    assert "\n" not in str(e.value)
