; captioner installer for Windows on ARM64 (NSIS 3; makensis also runs on Linux).
;
;   makensis /DVERSION=0.1.0 /DSTAGE=dist\captioner /DOUTFILE=dist\captioner-0.1.0-win-arm64-setup.exe installer\captioner.nsi
;   (on Linux the options start with -: makensis -DVERSION=0.1.0 -DSTAGE=... installer/captioner.nsi)
;
; VERSION  required; build.ps1 passes __version__ from captioner/__init__.py
; VIVERSION  optional numeric a.b.c.d for the version resource (default VERSION.0)
; STAGE    the PyInstaller one-folder bundle (captioner.exe, captioner-cli.exe, _internal\)
; OUTFILE  the setup program to write
;
; Per user, no administrator rights: $LOCALAPPDATA\Programs\captioner, a Start menu shortcut, an
; optional start with Windows (HKCU Run), an uninstall entry under HKCU. Installing again upgrades in
; place. The user's data (sessions, models, settings, caches, logs) lives apart from the program, in
; platformdirs' user data folder $LOCALAPPDATA\captioner (captioner/storage/paths.py); the uninstaller
; keeps it unless "Remove my data" is ticked (silently: uninstall.exe /S /REMOVEDATA).
; NSIS has no ARM64 stub: the setup program itself runs under x86 emulation, the app it installs is ARM64.

Unicode true
ManifestDPIAware true

!ifndef VERSION
  !error "pass the version: makensis /DVERSION=x.y.z (build.ps1 reads it from captioner/__init__.py)"
!endif
!ifndef STAGE
  !define STAGE "..\dist\captioner"
!endif
!ifndef VIVERSION  ; numeric a.b.c.d for the file's version resource (build.ps1 derives it from VERSION)
  !define VIVERSION "${VERSION}.0"
!endif
!ifndef OUTFILE
  !define OUTFILE "captioner-${VERSION}-win-arm64-setup.exe"
!endif

!define APP "captioner"
!define UNINST_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\${APP}"
!define RUN_KEY "Software\Microsoft\Windows\CurrentVersion\Run"
; platformdirs.user_data_dir("captioner", appauthor=False) on Windows; config, Cache\ and Logs\ are in it
!define DATA_DIR "$LOCALAPPDATA\${APP}"

!include MUI2.nsh
!include LogicLib.nsh
!include x64.nsh
!include FileFunc.nsh
!include Sections.nsh

Name "${APP} ${VERSION}"
OutFile "${OUTFILE}"
RequestExecutionLevel user
InstallDir "$LOCALAPPDATA\Programs\${APP}"
InstallDirRegKey HKCU "${UNINST_KEY}" "InstallLocation"
SetCompressor /SOLID lzma
BrandingText "${APP} ${VERSION}"

VIProductVersion "${VIVERSION}"
VIAddVersionKey "ProductName" "${APP}"
VIAddVersionKey "ProductVersion" "${VERSION}"
VIAddVersionKey "FileVersion" "${VERSION}"
VIAddVersionKey "FileDescription" "${APP} setup: live captions on the device"
VIAddVersionKey "LegalCopyright" "MIT licence"

!define MUI_ABORTWARNING
!define MUI_FINISHPAGE_RUN "$INSTDIR\captioner.exe"
!define MUI_FINISHPAGE_RUN_TEXT "Start captioner now"
!define MUI_COMPONENTSPAGE_NODESC

!insertmacro MUI_PAGE_WELCOME
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_COMPONENTS
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH

!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_COMPONENTS
!insertmacro MUI_UNPAGE_INSTFILES

!insertmacro MUI_LANGUAGE "English"

; Ask a running captioner to quit (its files cannot be replaced while it runs); quiet, no window.
!macro QUIT_RUNNING_APP
  ${If} ${FileExists} "$INSTDIR\captioner-cli.exe"
    nsExec::Exec '"$INSTDIR\captioner-cli.exe" --quit'
    Pop $0
    Sleep 1500
  ${EndIf}
!macroend

; Only what the installer put there: never RMDir /r the install folder itself (it may be one the user chose).
!macro REMOVE_PROGRAM_FILES
  RMDir /r "$INSTDIR\_internal"
  Delete "$INSTDIR\captioner.exe"
  Delete "$INSTDIR\captioner-cli.exe"
!macroend

Section "captioner (required)" SecProgram
  SectionIn RO
  SetShellVarContext current
  !insertmacro QUIT_RUNNING_APP
  ; upgrade in place: the old bundle goes first, so no file of an older version lingers in _internal
  !insertmacro REMOVE_PROGRAM_FILES
  SetOutPath "$INSTDIR"
  File /r "${STAGE}\*"
  WriteUninstaller "$INSTDIR\uninstall.exe"
  CreateShortcut "$SMPROGRAMS\captioner.lnk" "$INSTDIR\captioner.exe" "" "$INSTDIR\captioner.exe" 0 \
    SW_SHOWNORMAL "" "Live captions on the device"

  WriteRegStr HKCU "${UNINST_KEY}" "DisplayName" "captioner"
  WriteRegStr HKCU "${UNINST_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKCU "${UNINST_KEY}" "Publisher" "captioner"
  WriteRegStr HKCU "${UNINST_KEY}" "DisplayIcon" "$INSTDIR\captioner.exe"
  WriteRegStr HKCU "${UNINST_KEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKCU "${UNINST_KEY}" "UninstallString" '"$INSTDIR\uninstall.exe"'
  WriteRegStr HKCU "${UNINST_KEY}" "QuietUninstallString" '"$INSTDIR\uninstall.exe" /S'
  WriteRegDWORD HKCU "${UNINST_KEY}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINST_KEY}" "NoRepair" 1
  ${GetSize} "$INSTDIR" "/S=0K" $0 $1 $2
  IntFmt $0 "0x%08X" $0
  WriteRegDWORD HKCU "${UNINST_KEY}" "EstimatedSize" "$0"
SectionEnd

Section /o "Start captioner with Windows" SecAutostart
  WriteRegStr HKCU "${RUN_KEY}" "${APP}" '"$INSTDIR\captioner.exe" --minimized'
SectionEnd

Section "-autostart off" SecAutostartOff
  ${IfNot} ${SectionIsSelected} ${SecAutostart}
    DeleteRegValue HKCU "${RUN_KEY}" "${APP}"
  ${EndIf}
SectionEnd

Section "un.captioner (the program)" SecUnProgram
  SectionIn RO
  SetShellVarContext current
  !insertmacro QUIT_RUNNING_APP
  !insertmacro REMOVE_PROGRAM_FILES
  Delete "$SMPROGRAMS\captioner.lnk"
  DeleteRegValue HKCU "${RUN_KEY}" "${APP}"
  DeleteRegKey HKCU "${UNINST_KEY}"
  Delete "$INSTDIR\uninstall.exe"
  RMDir "$INSTDIR"
SectionEnd

Section /o "un.Remove my data (sessions, models, settings)" SecUnData
  RMDir /r "${DATA_DIR}"
SectionEnd

; (after the sections: the functions select them by index)
Function .onInit
  ${IfNot} ${IsNativeARM64}
    MessageBox MB_ICONSTOP|MB_OK "This captioner build is for Windows on ARM64 (Snapdragon). Use the x64 build on this PC." /SD IDOK
    Abort
  ${EndIf}
  ; upgrade: keep the folder of the installed version and its start-with-Windows choice
  ReadRegStr $0 HKCU "${UNINST_KEY}" "InstallLocation"
  ${If} $0 != ""
    StrCpy $INSTDIR $0
  ${EndIf}
  ReadRegStr $0 HKCU "${RUN_KEY}" "${APP}"
  ${If} $0 != ""
    !insertmacro SelectSection ${SecAutostart}
  ${EndIf}
FunctionEnd

Function un.onInit
  ; uninstall.exe /S /REMOVEDATA removes the data too, without asking
  ${GetParameters} $0
  ClearErrors
  ${GetOptions} $0 "/REMOVEDATA" $1
  ${IfNot} ${Errors}
    !insertmacro SelectSection ${SecUnData}
  ${EndIf}
FunctionEnd
