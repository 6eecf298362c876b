"""torchvision's detection ops on cuda (NOTE [extension operators] in gpud/aten_exec.py): a Faster R-CNN built
without weights (inference, then a training step), nms, roi_align with its gradient, and a rois batch index out
of range. Prints one JSON line."""

import json
import sys

import torch
import torchvision

dev = sys.argv[1]
torch.manual_seed(0)
out: dict = {}
m = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
    weights=None, weights_backbone=None, num_classes=5
).eval()
m = m.to(dev)
x = [torch.rand(3, 200, 240).to(dev)]
with torch.no_grad():
    det = m(x)[0]
out["boxes"] = det["boxes"].sum().item()
out["scores"] = det["scores"].sum().item()
out["n"] = int(det["boxes"].shape[0])
b = torch.rand(10, 4) * 100
b[:, 2:] += b[:, :2]
out["nms"] = torchvision.ops.nms(b.to(dev), torch.rand(10).to(dev), 0.3).tolist()
feat = torch.rand(2, 3, 16, 16).to(dev).requires_grad_()
r = torchvision.ops.roi_align(feat, torch.tensor([[1.0, 0, 0, 8, 8], [0, 2, 2, 10, 12]]).to(dev), 4, aligned=True)
r.square().sum().backward()
out["roi"] = r.sum().item()
out["roi_grad"] = feat.grad.abs().sum().item()
p, _ = torch.ops.torchvision.roi_pool(feat.detach(), torch.tensor([[1.0, 0, 0, 8, 8]]).to(dev), 1.0, 3, 3)
out["roi_pool"] = p.sum().item()
if dev == "cuda":  # the kernel reads plane rois[k, 0] unchecked: gpud refuses it (a host run reads past the batch)
    try:
        torchvision.ops.roi_align(feat.detach(), torch.tensor([[7.0, 0, 0, 8, 8]]).to(dev), 4).sum().item()
        out["bad_rois"] = "ran"
    except RuntimeError as exc:
        out["bad_rois"] = str(exc)
print(json.dumps(out))
