"""Image workloads over a JPEG ImageFolder: decode, random-resized crop, flip, normalize."""

from __future__ import annotations

from pathlib import Path

from torch import nn

from workbench.engine.attention import SDPA_KEY
from workbench.engine.epochs import SAMPLE_SET
from workbench.engine.workloads.base import Workload, say_progress

# ImageNet statistics: the sample images and a user's photos are normalized the same way.
_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)


def train_transform(size: int):
    """The classic ImageNet training augmentation, at ``size`` pixels."""
    # torchvision only when an image workload is built
    from torchvision import transforms as T

    return T.Compose(
        [
            T.RandomResizedCrop(size, antialias=True),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize(_MEAN, _STD),
        ]
    )


def image_folder(data_dir: str | Path | None) -> Path:
    """The ImageFolder to read: a given folder (itself, or its ``images/``) or the sample one.

    An explicit folder must exist and hold images (a DataError otherwise); with none given the
    sample datasets are used, and built first if they are missing.
    """
    from workbench.engine import datasets as data  # PIL and numpy: only when the workload is built

    if data_dir is None:
        return data.ensure_datasets(progress=say_progress).images
    path = Path(data_dir).expanduser()
    if (path / "images").is_dir():
        path = path / "images"
    data.check_image_folder(path)
    return path


def _image_workload(name: str, model, size: int, data_dir, description: str) -> Workload:
    from workbench.engine import datasets as data  # PIL and numpy: only when the workload is built

    folder = image_folder(data_dir)
    _, classes = data.check_image_folder(folder)
    n_classes = len(classes)
    return Workload(
        name=name,
        model=lambda: model(n_classes),
        dataset=lambda: data.ImageFiles(folder, transform=train_transform(size)),
        description=description,
        image_dir=folder,
        extras={
            "image_size": size,
            "classes": n_classes,
            SAMPLE_SET: data.is_sample_data(folder),
            SDPA_KEY: "none",  # convolutions only: the attention knob has nothing to choose
        },
    )


class SmallConvNet(nn.Module):
    """Four conv-BN-ReLU blocks and a linear head: about 90 MFLOPs forward at 64 px."""

    def __init__(self, num_classes: int, width: int = 16):
        super().__init__()
        chans = [3, width, width * 2, width * 4, width * 8]
        blocks = []
        for i in range(4):
            stride = 1 if i == 0 else 2
            blocks.append(
                nn.Sequential(
                    nn.Conv2d(chans[i], chans[i + 1], 3, stride=stride, padding=1, bias=False),
                    nn.BatchNorm2d(chans[i + 1]),
                    nn.ReLU(inplace=True),
                )
            )
        self.features = nn.Sequential(*blocks)
        self.head = nn.Linear(chans[-1], num_classes)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))

    def checkpoint_blocks(self) -> list[nn.Module]:
        """The conv-BN-ReLU blocks: what ``activation_checkpointing`` recomputes."""
        return list(self.features)


def cnn(data_dir: str | Path | None = None) -> Workload:
    """A small convnet on 64 px crops of the JPEG ImageFolder: interactive even on a CPU."""
    return _image_workload(
        "cnn",
        lambda n: SmallConvNet(n),
        64,
        data_dir,
        "small convnet, 64 px random-resized crops of full-size JPEGs",
    )


def resnet50(data_dir: str | Path | None = None) -> Workload:
    """torchvision's ResNet-50 (random init) on 224 px crops: the classic GPU benchmark."""

    def build(n: int) -> nn.Module:
        # torchvision only when an image workload is built
        from torchvision.models import resnet50 as tv_resnet50

        return tv_resnet50(weights=None, num_classes=n)

    return _image_workload(
        "resnet50", build, 224, data_dir, "ResNet-50, 224 px random-resized crops"
    )
