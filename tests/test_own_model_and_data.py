"""Your own model and data (issue 10): a factory, a loss, data as tensors or any map-style
torch Dataset, through train.train and the parameter server on a real local Ray."""
import functools
import threading

import pytest
import ray
import torch
from torch import nn

from hetlab import HetlabError
from hetlab.core.data import as_tensors, load_mnist
from hetlab.core.models import as_factory, count_params, make_model, model_label
from hetlab.ps import ParameterServerTraining, WorkerSpec
from hetlab.core.train import evaluate, train


class Strokes(torch.utils.data.Dataset):
    """A synthetic non-MNIST task: 1×8×8 noisy images of one stroke, 4 classes —
    horizontal, vertical, diagonal, anti-diagonal — at a random place. Chance: 25 %."""

    def __init__(self, n: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, 4, (n,), generator=g)
        self.x = 0.4 * torch.randn(n, 1, 8, 8, generator=g)
        where = torch.randint(0, 8, (n,), generator=g)
        shift = torch.randint(-3, 4, (n,), generator=g)
        i = torch.arange(8)
        for k in range(n):
            c, w, s = int(self.y[k]), int(where[k]), int(shift[k])
            if c == 0:
                self.x[k, 0, w, :] += 1.0
            elif c == 1:
                self.x[k, 0, :, w] += 1.0
            else:
                j = (i + s) if c == 2 else (7 - i + s)
                ok = (j >= 0) & (j < 8)
                self.x[k, 0, i[ok], j[ok]] += 1.0

    def __len__(self):
        return len(self.y)

    def __getitem__(self, k):
        return self.x[k], int(self.y[k])  # (tensor, int label): what a learner's Dataset returns


def stroke_net() -> nn.Module:
    """A different small ConvNet: 3×3 stroke detectors, global max pool, linear (116 parameters)."""
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveMaxPool2d(1),
                         nn.Flatten(), nn.Linear(8, 4))


def wide_stroke_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveMaxPool2d(1),
                         nn.Flatten(), nn.Linear(16, 4))


smoothed = functools.partial(nn.functional.cross_entropy, label_smoothing=0.05)


@pytest.fixture(scope="module")
def strokes():
    return Strokes(1200, seed=1), Strokes(400, seed=2)


def test_a_factory_builds_the_same_weights_for_the_same_seed():
    assert count_params(make_model(stroke_net)) == 116
    same = [flat(make_model(stroke_net, seed=3)) for _ in range(2)]
    assert torch.equal(*same) and not torch.equal(same[0], flat(make_model(stroke_net, seed=4)))


def flat(model):
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


def test_three_forms_of_data_give_the_same_tensors(strokes):
    ds = strokes[0]
    x, y = as_tensors(ds)
    assert x.shape == (1200, 1, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.int64
    x2, y2 = as_tensors((ds.x.numpy(), ds.y.int()))
    assert torch.equal(x, x2) and torch.equal(y, y2)
    mnist = load_mnist("test").subset(10)
    assert torch.equal(as_tensors(mnist)[0], mnist.normalized())


class PlainItems(torch.utils.data.Dataset):
    def __len__(self):
        return 3

    def __getitem__(self, k):
        return torch.zeros(4)


class RaggedItems(PlainItems):
    def __getitem__(self, k):
        return torch.zeros(k + 1), 0


@pytest.mark.parametrize("data, message", [
    (PlainItems(), "data do not make inputs and labels"),
    (RaggedItems(), "data do not make inputs and labels \\(RuntimeError"),
    ((torch.zeros(5, 2), "labels"), "data do not make inputs and labels"),
    ((torch.zeros(5, 2), torch.zeros(4)), "inputs x \\(N×…\\) and labels y \\(N\\)"),
    ((torch.zeros(5, 2), torch.rand(5)), "labels must be whole numbers"),
    ([1, 2, 3], "data must be a hetlab Dataset"),
])
def test_bad_data_is_one_line(data, message):
    with pytest.raises(HetlabError, match=message) as err:
        as_tensors(data)
    assert "\n" not in str(err.value)


def test_bad_models_are_one_line_and_lambdas_are_fine():
    lock = threading.Lock()
    cases = [("resnet", "unknown model 'resnet'"), (stroke_net(), "got a built Sequential"),
             (42, "must be a built-in name"), (lambda: 3, "returned int, not an nn.Module"),
             (lambda: (lock, stroke_net())[1], "cannot be pickled for Ray")]
    for model, message in cases:
        with pytest.raises(HetlabError, match=message) as err:
            as_factory(model)
        assert "\n" not in str(err.value)
    assert as_factory(lambda: stroke_net())  # cloudpickle sends lambdas fine
    assert model_label(stroke_net).endswith("stroke_net") and model_label("small") == "small"


def test_train_learns_a_custom_model_on_a_map_style_dataset(strokes):
    net = make_model(stroke_net)
    hist = train(net, strokes[0], as_tensors(strokes[1]), epochs=3, batch_size=32, lr=1e-2,
                 loss=smoothed, progress=False)
    assert hist.final_accuracy > 0.8, hist.test_accuracy  # chance is 0.25
    assert count_params(net) == 116 and evaluate(net, strokes[1]) == hist.final_accuracy


def test_a_model_that_does_not_fit_the_data_fails_before_training(strokes):
    with pytest.raises(HetlabError, match="model 'small' and loss do not fit the data") as err:
        ParameterServerTraining([WorkerSpec("a")], strokes[0], model="small", progress=False)  # 28×28 on 8×8
    assert "\n" not in str(err.value)
    assert not ray.is_initialized()  # refused before Ray started


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()


def test_parameter_server_learns_own_model_and_data_and_resumes_it(local_ray, strokes, tmp_path):
    workers = [WorkerSpec("a"), WorkerSpec("b")]
    with ParameterServerTraining(workers, strokes[0], model=stroke_net, loss=smoothed, lr=1e-2,
                                 batch_sizes=[48, 16], progress=False) as run:
        records = run.run(30)
        accuracy = run.evaluate(strokes[1])
        path = run.save_checkpoint(tmp_path / "own.pt")
        weights = flat(run.model())
    assert accuracy > 0.8, accuracy  # chance is 0.25
    assert sum(r.loss for r in records[-10:]) < sum(r.loss for r in records[:10])
    assert run.model_name.endswith("stroke_net") and run.data_len == 1200
    with pytest.raises(HetlabError, match="holds your own model .*stroke_net.*: resume with model="):
        ParameterServerTraining.resume(path, workers, strokes[0], progress=False)
    with pytest.raises(HetlabError, match="parameter shapes that do not fit"):
        ParameterServerTraining.resume(path, workers, strokes[0], model=wide_stroke_net, progress=False)
    x, y = as_tensors(strokes[0])  # the same data as tensors resumes the same training
    with ParameterServerTraining.resume(path, workers, (x, y), model=stroke_net, loss=smoothed,
                                        progress=False) as resumed:
        assert resumed.step == 30 and torch.equal(flat(resumed.model()), weights)
        resumed.run(2)
        assert resumed.step == 32
