<#
.SYNOPSIS
  Builds the captioner installer for Windows on ARM64: the PyInstaller bundle, then the NSIS setup program.

.DESCRIPTION
  Run on Windows ARM64 with a native ARM64 Python 3.12 or newer (PyInstaller cannot cross-build, and an
  x64 Python under emulation would freeze x64 binaries). From the repository root:

    powershell -ExecutionPolicy Bypass -File installer\build.ps1 [-Python C:\Python312-arm64\python.exe]

  Steps: a fresh virtual environment in build\venv-win-arm64; the locked runtime set and PyInstaller
  (requirements\windows-build.txt, exact versions with hashes, refreshed by scripts/lock), then captioner
  itself without dependencies; pyinstaller
  installer\captioner.spec (one folder in dist\captioner); makensis installer\captioner.nsi with the
  version from captioner\__init__.py. Output: dist\captioner-<version>-win-arm64-setup.exe.
  makensis comes from PATH or the NSIS default folder (choco install nsis / winget install NSIS.NSIS).
#>
param(
    [string]$Python = "python"
)
$ErrorActionPreference = "Stop"
Set-StrictMode -Version Latest
$Repo = Split-Path -Parent $PSScriptRoot
Set-Location $Repo

function Invoke-Checked([string]$What, [scriptblock]$Command) {
    & $Command
    if ($LASTEXITCODE -ne 0) { throw "$What failed (exit code $LASTEXITCODE)" }
}

# The target: Windows on ARM64, native ARM64 Python >= 3.12
$machine = & $Python -c "import platform; print(platform.machine())"
$pyver = & $Python -c "import sys; print('%d.%d' % sys.version_info[:2])"
if ($LASTEXITCODE -ne 0) { throw "cannot run Python ($Python)" }
if ($machine.Trim() -ne "ARM64") {
    throw "this Python is $machine, not ARM64: use a native ARM64 Python on Windows ARM64 (PyInstaller cannot cross-build)"
}
if ([version]$pyver -lt [version]"3.12") {
    throw "Python $pyver is too old: 3.12 or newer is needed (PyYAML has no cp311 win_arm64 wheel; ECOSYSTEM.md section 6)"
}

# The version, from the one place it is written
$init = Get-Content -Raw (Join-Path $Repo "captioner\__init__.py")
if ($init -notmatch '(?m)^__version__\s*=\s*"([^"]+)"') { throw "no __version__ in captioner\__init__.py" }
$Version = $Matches[1]
if ($Version -notmatch '^(\d+)\.(\d+)\.(\d+)') { throw "version $Version does not start with a.b.c" }
$ViVersion = "$($Matches[1]).$($Matches[2]).$($Matches[3]).0"
Write-Host "captioner $Version (Python $pyver, $machine)"

# A clean environment with only the locked runtime dependencies and PyInstaller
$venv = Join-Path $Repo "build\venv-win-arm64"
if (Test-Path $venv) { Remove-Item -Recurse -Force $venv }
Invoke-Checked "venv" { & $Python -m venv $venv }
$vpy = Join-Path $venv "Scripts\python.exe"
$lock = Join-Path $Repo "requirements\windows-build.txt"
Invoke-Checked "pip install (locked)" { & $vpy -m pip install --quiet --require-hashes --no-deps -r $lock }
Invoke-Checked "pip install captioner" { & $vpy -m pip install --quiet --no-deps . }

# The one-folder bundle: dist\captioner\captioner.exe, captioner-cli.exe, _internal\
$dist = Join-Path $Repo "dist"
Invoke-Checked "pyinstaller" {
    & $vpy -m PyInstaller --noconfirm --clean --distpath $dist --workpath (Join-Path $Repo "build\pyinstaller") `
        installer\captioner.spec
}
$stage = Join-Path $dist "captioner"
foreach ($exe in "captioner.exe", "captioner-cli.exe") {
    if (-not (Test-Path (Join-Path $stage $exe))) { throw "the bundle has no $exe" }
}
$skels = @(Get-ChildItem (Join-Path $stage "_internal\onnxruntime_qnn") -Filter "libQnnHtpV*Skel.so")
$cats = @(Get-ChildItem (Join-Path $stage "_internal\onnxruntime_qnn") -Filter "*.cat")
if ($skels.Count -eq 0 -or $cats.Count -eq 0) { throw "the bundle lacks the QNN HTP skeletons or their .cat catalogs" }
Invoke-Checked "bundle smoke test" { & (Join-Path $stage "captioner-cli.exe") --version }

# The setup program
$makensis = (Get-Command makensis -ErrorAction SilentlyContinue).Source
if (-not $makensis) {
    foreach ($dir in ${env:ProgramFiles(x86)}, $env:ProgramFiles) {
        if ($dir -and (Test-Path (Join-Path $dir "NSIS\makensis.exe"))) { $makensis = Join-Path $dir "NSIS\makensis.exe"; break }
    }
}
if (-not $makensis) { throw "makensis not found: install NSIS (choco install nsis, or winget install NSIS.NSIS)" }
$setup = Join-Path $dist "captioner-$Version-win-arm64-setup.exe"
Invoke-Checked "makensis" {
    & $makensis /V2 /WX "/DVERSION=$Version" "/DVIVERSION=$ViVersion" "/DSTAGE=$stage" "/DOUTFILE=$setup" `
        installer\captioner.nsi
}
$size = (Get-ChildItem -Recurse -File $stage | Measure-Object -Sum Length).Sum / 1MB
Write-Host ("bundle {0:N0} MB; installer {1}: {2:N0} MB" -f $size, $setup, ((Get-Item $setup).Length / 1MB))
