"""A compressor, error feedback and the wire format, in one process (no communication).

Run: python docs/examples/compressors_local.py
"""

import numpy as np

import compressors

print("compressors:", ", ".join(compressors.available()))
grad = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)

comp = compressors.get("topk:ratio=0.01")            # or compressors.get("topk", ratio=0.01)
print("top-k capabilities:", comp.capabilities)       # sparse, not summable
ef = compressors.ErrorFeedback(comp)

g = ef.compensate(grad, "layer1.weight")              # grad + what was held back before
payload = comp.compress(g, name="layer1.weight", step=0)
ef.update("layer1.weight", g, payload)                # residual = g - decompress(payload)

wire = payload.to_bytes()                             # self-describing header + buffers
print(f"{grad.nbytes} bytes -> {len(wire)} on the wire")
approx = compressors.decompress(compressors.Payload.from_bytes(wire))
assert approx.shape == grad.shape

# What was sent plus what is held back is what came in.
assert np.allclose(approx + ef.residuals["layer1.weight"].reshape(approx.shape), g, atol=1e-6)

try:                                                  # damaged bytes never decode
    compressors.Payload.from_bytes(wire[:-1])
except compressors.PayloadError as exc:
    print("refused:", exc)
