"""Every error this package raises, under one base class.

The command line (:func:`sglang_eagle3_capture.doctor.cli.main`) prints one line for each: an
:class:`AmbiguousLayerIds` exits 3; every other :class:`Eagle3CaptureError` exits 2 (an
:class:`InputError` names the file, the field and the fix; any other, e.g. a :class:`DeploymentError`
refusal, is still reported as input); an ``OSError`` naming a file exits 2 as well; any other exception is
a bug and exits 70 with the traceback saved to a file named in that line.
Inside SGLang, a :class:`DeploymentError` refuses a deployment at startup with the same kind of line.

Errors stay ``ValueError`` / ``RuntimeError`` subclasses, as they were before this module existed, so
callers that caught those keep working.
"""

from __future__ import annotations


class Eagle3CaptureError(Exception):
    """Base class of every error raised by sglang-eagle3-capture."""


class InputError(Eagle3CaptureError, ValueError):
    """Bad input the user can correct (exit status 2); the message names the file, the field and the fix."""


class UsageError(InputError):
    """A command-line option that cannot be used as given."""


class LayerIdError(InputError):
    """A layer-id list that cannot be wired to the target."""


class ManifestError(InputError):
    """A manifest (or a target/draft checked against it) that cannot be used."""


class FormatError(InputError):
    """A foreign-format file whose layer ids cannot be read faithfully."""


class AmbiguousLayerIds(FormatError):
    """A config whose ids mean different layers depending on the release or trainer it was trained with
    (exit status 3); ``readings`` lists every meaning with who trains that way."""

    def __init__(self, message: str, readings: tuple | list = ()) -> None:
        super().__init__(message)
        self.readings = tuple(readings)


class WeightsError(InputError):
    """A checkpoint file that cannot be read or does not hold what its config says."""


class DraftFormatError(InputError):
    """A draft directory SGLang's EAGLE-3 draft class would not load the way this package models it."""


class ConvertError(InputError):
    """A draft that cannot be converted faithfully."""


class SampleError(InputError):
    """A training-sample or capture-dump file that cannot be read as a supported layout."""


class DumpConfigError(InputError):
    """A capture-dump environment variable that cannot be used."""


class DeploymentError(Eagle3CaptureError, ValueError):
    """A deployment SGLang must not run as configured; raised at startup inside SGLang's processes."""


class WiringError(DeploymentError):
    """A target capture the plugin refuses to wire."""


class DraftHeadError(DeploymentError):
    """A draft SGLang must not serve as it is."""


class SelfCheckError(DeploymentError):
    """The first-batch self-check found an fc chunk that is not the hidden state the manifest names."""


class PatchError(Eagle3CaptureError, RuntimeError):
    """The installed SGLang does not have the shape a patch was written against."""


class UnsupportedSGLangVersion(Eagle3CaptureError, RuntimeError):
    """The installed SGLang is not a release this package supports."""
