"""The environment files of the ``environment_setup_commit``s SWE-bench's xarray
instances name, as pydata/xarray's git has them (``ci/requirements/environment.yml``;
xarray is Apache-2.0). Data, no I/O.

SWE-bench reads an instance's ``environment.yml`` at its setup commit
(`aexec._environments.commits`); a checkout made without its history (one commit of the
base's tree) does not hold it, and xarray's bases before 2021-01-11 have no
``environment.yml`` at all. These are read in its place, and the instance's note says
so. Each is keyed by its commit and path, and its SHA-256 is checked in the tests.
"""

from __future__ import annotations

from typing import Final

#: ``(commit, path) -> text`` (each a version's setup commit: 0.12, 0.18, 0.19, 0.20,
#: 2022.03, 2022.06, 2022.09).
SHIPPED: Final[dict[tuple[str, str], str]] = {
    # xarray 0.12
    ("1c198a191127c601d091213c4b3292a8bb3054e1", "ci/requirements/environment.yml"): """\
name: xarray-tests
channels:
  - conda-forge
  - nodefaults
dependencies:
  - aiobotocore
  - boto3
  - bottleneck
  - cartopy
  - cdms2
  - cfgrib
  - cftime
  - dask
  - distributed
  - h5netcdf
  - h5py
  - hdf5
  - hypothesis
  - iris
  - lxml    # Optional dep of pydap
  - matplotlib-base
  - nc-time-axis
  - netcdf4
  - numba
  - numexpr
  - numpy
  - pandas
  - pint
  - pip
  - pooch
  - pre-commit
  - pseudonetcdf
  - pydap
  # - pynio: not compatible with netCDF4>1.5.3; only tested in py37-bare-minimum
  - pytest
  - pytest-cov
  - pytest-env
  - pytest-xdist
  - rasterio
  - scipy
  - seaborn
  - setuptools
  - sparse
  - toolz
  - zarr
  - pip:
    - numbagg
""",
    # xarray 0.18
    ("4f1e2d37b662079e830c9672400fabc19b44a376", "ci/requirements/environment.yml"): """\
name: xarray-tests
channels:
  - conda-forge
  - nodefaults
dependencies:
  - aiobotocore
  - boto3
  - bottleneck
  - cartopy
  - cdms2
  - cfgrib
  - cftime
  - dask
  - distributed
  - fsspec!=2021.7.0
  - h5netcdf
  - h5py
  - hdf5
  - hypothesis
  - iris
  - lxml    # Optional dep of pydap
  - matplotlib-base
  - nc-time-axis
  - netcdf4
  - numba
  - numexpr
  - numpy
  - pandas
  - pint
  - pip
  - pooch
  - pre-commit
  - pseudonetcdf
  - pydap
  # - pynio: not compatible with netCDF4>1.5.3; only tested in py37-bare-minimum
  - pytest
  - pytest-cov
  - pytest-env
  - pytest-xdist
  - rasterio
  - scipy
  - seaborn
  - setuptools
  - sparse
  - toolz
  - zarr
  - pip:
    - numbagg
""",
    # xarray 0.19
    ("df7646182b17d829fe9b2199aebf649ddb2ed480", "ci/requirements/environment.yml"): """\
name: xarray-tests
channels:
  - conda-forge
  - nodefaults
dependencies:
  - aiobotocore
  - boto3
  - bottleneck
  - cartopy
  - cdms2
  - cfgrib
  - cftime
  - dask
  - distributed
  - fsspec!=2021.7.0
  - h5netcdf
  - h5py
  - hdf5
  - hypothesis
  - iris
  - lxml    # Optional dep of pydap
  - matplotlib-base
  - nc-time-axis
  - netcdf4
  - numba
  - numexpr
  - numpy
  - pandas
  - pint
  - pip
  - pooch
  - pre-commit
  - pseudonetcdf
  - pydap
  # - pynio: not compatible with netCDF4>1.5.3; only tested in py37-bare-minimum
  - pytest
  - pytest-cov
  - pytest-env
  - pytest-xdist
  - rasterio
  - scipy
  - seaborn
  - setuptools
  - sparse
  - toolz
  - zarr
  - pip:
    - numbagg
""",
    # xarray 0.20
    ("8f42bfd3a5fd0b1a351b535be207ed4771b02c8b", "ci/requirements/environment.yml"): """\
name: xarray-tests
channels:
  - conda-forge
  - nodefaults
dependencies:
  - aiobotocore
  - boto3
  - bottleneck
  - cartopy
  - cdms2
  - cfgrib
  - cftime
  - dask-core
  - distributed
  - fsspec!=2021.7.0
  - h5netcdf
  - h5py
  - hdf5
  - hypothesis
  - iris
  - lxml # Optional dep of pydap
  - matplotlib-base
  - nc-time-axis
  - netcdf4
  - numba
  - numexpr
  - numpy
  - packaging
  - pandas
  - pint
  - pip
  - pooch
  - pre-commit
  - pseudonetcdf
  # - pydap  # https://github.com/pydap/pydap/pull/210
  # - pynio: not compatible with netCDF4>1.5.3; only tested in py37-bare-minimum
  - pytest
  - pytest-cov
  - pytest-env
  - pytest-github-actions-annotate-failures
  - pytest-xdist
  - rasterio
  - scipy
  - seaborn
  - sparse
  - toolz
  - typing_extensions
  - zarr
  - pip:
      - numbagg
""",
    # xarray 2022.03
    ("d7931f9014a26e712ff5f30c4082cf0261f045d3", "ci/requirements/environment.yml"): """\
name: xarray-tests
channels:
  - conda-forge
  - nodefaults
dependencies:
  - aiobotocore
  - boto3
  - bottleneck
  - cartopy
  - cdms2
  - cfgrib
  - cftime
  - dask-core
  - distributed
  - flox
  - fsspec!=2021.7.0
  - h5netcdf
  - h5py
  - hdf5
  - hypothesis
  - iris
  - lxml # Optional dep of pydap
  - matplotlib-base
  - nc-time-axis
  - netcdf4
  - numba
  - numexpr
  - numpy
  - packaging
  - pandas
  - pint
  - pip
  - pooch
  - pre-commit
  - pseudonetcdf
  # - pydap  # https://github.com/pydap/pydap/pull/210
  # - pynio: not compatible with netCDF4>1.5.3; only tested in py37-bare-minimum
  - pytest
  - pytest-cov
  - pytest-env
  - pytest-xdist
  - rasterio
  - scipy
  - seaborn
  - sparse
  - toolz
  - typing_extensions
  - zarr
  - pip:
      - numbagg
""",
    # xarray 2022.06
    ("50ea159bfd0872635ebf4281e741f3c87f0bef6b", "ci/requirements/environment.yml"): """\
name: xarray-tests
channels:
  - conda-forge
  - nodefaults
dependencies:
  - aiobotocore
  - boto3
  - bottleneck
  - cartopy
  - cdms2
  - cfgrib
  - cftime
  - dask-core
  - distributed
  - flox
  - fsspec!=2021.7.0
  - h5netcdf
  - h5py
  - hdf5
  - hypothesis
  - iris
  - lxml # Optional dep of pydap
  - matplotlib-base
  - nc-time-axis
  - netcdf4
  - numba
  - numexpr
  - numpy
  - packaging
  - pandas
  - pint
  - pip
  - pooch
  - pre-commit
  - pseudonetcdf
  - pydap
  # - pynio: not compatible with netCDF4>1.5.3; only tested in py37-bare-minimum
  - pytest
  - pytest-cov
  - pytest-env
  - pytest-xdist
  - rasterio
  - scipy
  - seaborn
  - sparse
  - toolz
  - typing_extensions
  - zarr
  - pip:
      - numbagg
""",
    # xarray 2022.09
    ("087ebbb78668bdf5d2d41c3b2553e3f29ce75be1", "ci/requirements/environment.yml"): """\
name: xarray-tests
channels:
  - conda-forge
  - nodefaults
dependencies:
  - aiobotocore
  - boto3
  - bottleneck
  - cartopy
  - cdms2
  - cftime
  - dask-core
  - distributed
  - flox
  - fsspec!=2021.7.0
  - h5netcdf
  - h5py
  - hdf5
  - hypothesis
  - iris
  - lxml  # Optional dep of pydap
  - matplotlib-base
  - nc-time-axis
  - netcdf4
  - numba
  - numbagg
  - numexpr
  - numpy<1.24
  - packaging
  - pandas
  - pint
  - pip
  - pooch
  - pre-commit
  - pseudonetcdf
  - pydap
  - pytest
  - pytest-cov
  - pytest-env
  - pytest-xdist
  - pytest-timeout
  - rasterio
  - scipy
  - seaborn
  - sparse
  - toolz
  - typing_extensions
  - zarr
""",
}
