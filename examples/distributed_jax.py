# op-file: rms_norm
"""scale_lib ops under jax.jit over arrays sharded across devices: the outputs stay sharded and
the compiled program has no all-gather.

    python examples/distributed_jax.py      # the GPUs, or else 4 CPU devices

Prints the output shardings and the collectives in the compiled HLO.
"""

from __future__ import annotations

import os
import re
import sys

# Without GPUs, split the CPU into 4 devices (must be set before JAX starts).
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"

import jax
import jax.numpy as jnp

import scale_lib


def main() -> int:
    n = len(jax.devices())
    if n < 2:
        print("needs 2 or more devices")
        return 1
    # [jax_sharded.begin]
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((n,), ("batch",))
    x = jax.device_put(jnp.ones((8 * n, 4096), jnp.float32), NamedSharding(mesh, P("batch", None)))
    weight = jnp.full((4096,), 0.5, jnp.float32)

    @jax.jit
    def block(x, weight):
        h = scale_lib.rms_norm(x, weight)  # each device normalises its own rows
        return x + scale_lib.scale(h, 0.5)  # x + 0.5 * h, elementwise on the shards

    out = block(x, weight)
    print(out.sharding.spec)  # P('batch',): still sharded by rows
    hlo = block.lower(x, weight).compile().as_text()
    # [jax_sharded.end]
    collectives = sorted(set(re.findall(r"\b(all-gather|all-reduce|all-to-all|reduce-scatter)\b", hlo)))
    print("collectives in the compiled HLO:", collectives or "none")
    grad = jax.jit(jax.grad(lambda x, w: block(x, w).sum(), argnums=1))(x, weight)
    print("weight gradient:", grad.shape, grad.sharding.spec)
    rows = NamedSharding(mesh, P("batch", None))
    return 0 if out.sharding.is_equivalent_to(rows, out.ndim) and not collectives else 1


if __name__ == "__main__":
    sys.exit(main())
