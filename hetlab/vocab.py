"""hetlab's vocabulary: the names every layer agrees on, defined once (notebooks 01-08).

The CLI's choices, the planner's byte sizes and the engine's checks all read them from here.
Nothing here imports torch or Ray, so ``hetlab --help`` and bad-input checks stay fast.
"""
MODES = ("sync", "async", "local_sgd")                # how workers and server take turns (05, 08)
CLI_MODES = {"sync": "sync", "async": "async", "local-sgd": "local_sgd", "local_sgd": "local_sgd"}
PRECISIONS = ("fp32", "bf16", "fp16")                 # a worker's compute precision, autocast (02)
TRANSFERS = ("fp32", "fp16", "bf16")                  # gradients / deltas on the wire (08)
BYTES_PER_VALUE = {"fp32": 4, "fp16": 2, "bf16": 2}   # of each transfer format
WEIGHTS_DOWN = "fp32"                                 # the server always sends fp32 weights
OPTIMIZERS = ("adam", "sgd")                          # the server's, in sync and async modes
DEVICE_KINDS = ("cuda", "mps", "cpu")                 # what torch can train on (01)
MODEL_NAMES = ("small", "classic", "ray_example")     # the built-in networks, hetlab.models.MODELS
ROLES = ("desktop", "mac")                            # the two machines of the course (03)

# environment variables a learner (or CI) sets
ADDRESS_ENV = "HETLAB_ADDRESS"      # the Ray head of the real pair: notebooks 03-08 run there
QUICK_ENV = "HETLAB_QUICK"          # 1: the short runs of `make test`
REHEARSAL_ENV = "HETLAB_REHEARSAL"  # set on the hosts of `hetlab rehearse`
