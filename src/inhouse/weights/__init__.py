"""Signed model weights: sign and verify (OpenSSF model-signing), push to and pull from an S3
registry, the node's verified weight cache. See docs/weights.md.

Import the submodules (`inhouse.weights.verify`, `.registry`, `.pull`, ...) where they are
needed: model-signing and boto3 take most of a second to import, and most commands need neither.
"""
